"""A row left by an admission its coordinator never recorded does not block its helper id for ever (R4, R19, R38).

A worker killed after the admission's row was written (and maybe its workflow started), before the update
completed, loses the admission: the coordinator's book never held it, and the owner's next admission takes
its seq. The chaos soak (seed 42) then met the starter's retry refused for good, "row … exists with another
admission", and the row stayed `running` in the store. Here the lost admission is made as the coordinator's
local activity makes it (the real activity, under a seq the book will give someone else), on the dev server
with the real worker, core and chat.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import UTC, datetime

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment

from activities.admission import AdmissionActivities
from domain.book.writes import helper_start
from domain.limits import effective_limits
from domain.messages.activities import AdmitHelper, NewRow
from domain.messages.workflows import HelperResult
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.names import COUNTS, coordinator_id, helper_workflow_id
from reference.core.script import scripted_task
from store.results import ResultDirectories
from tests.e2e.conftest import Stack
from tests.helpers import eventually, helper_request, rows_of

pytestmark = pytest.mark.e2e

UNRECORDED_SEQ = 7  # the coordinator's book starts at 1: this seq is of no admission it recorded


async def _lose_an_admission(stack: Stack, helper_id: str, task: str) -> None:
    """What the admission's local activity did before its worker died: the row, then the helper's workflow."""
    request = helper_request(stack.owner, helper_id, task)
    policy = stack.settings.policy
    limits = effective_limits(policy.limits, request.session_limits, request.limits)
    admitted = AdmitHelper(
        row=NewRow(request=request, seq=UNRECORDED_SEQ, limits=limits, admitted_at=datetime.now(UTC)),
        start=helper_start(policy, request, seq=UNRECORDED_SEQ, limits=limits, slot_granted=True),
    )
    environment = ActivityEnvironment(client=stack.env.client)
    environment.info = dataclasses.replace(environment.info, task_queue=stack.settings.task_queue)
    activities = AdmissionActivities(stack.store, ResultDirectories(stack.settings.results_dir))
    await environment.run(activities.admit_helper, admitted)


async def _outcome(stack: Stack, helper_id: str) -> HelperRow | None:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def test_a_row_whose_unrecorded_admission_ended_gives_way_to_the_next_admission(stack: Stack) -> None:
    await _lose_an_admission(stack, "lost", scripted_task("Lost.", steps=1, step_ms=20, final_text="Lost done."))
    orphan = await eventually(functools.partial(_outcome, stack, "lost"), timeout=30)
    assert orphan.seq == UNRECORDED_SEQ and orphan.state is RowState.UNREPORTED  # nobody will ever read it

    admission = await stack.client.start(
        helper_request(stack.owner, "lost", scripted_task("Again.", steps=1, step_ms=20, final_text="Again done."))
    )

    assert admission.status is RowState.RUNNING and not admission.existing
    row = await eventually(functools.partial(_outcome, stack, "lost"), timeout=30)
    assert row.seq != UNRECORDED_SEQ and row.outcome_kind is OutcomeKind.COMPLETED
    assert "Again done." in (row.summary or "")
    description = await stack.env.client.get_workflow_handle(helper_workflow_id(stack.owner, "lost")).describe()
    assert (await description.memo())["seq"] == row.seq
    assert [r.helper_id for r in await rows_of(stack.store, stack.owner)] == ["lost"]


async def test_a_row_whose_unrecorded_admission_still_runs_is_closed_then_replaced(stack: Stack) -> None:
    """The unrecorded helper runs in a slot the book does not count: it is closed (its core session stopped)
    before the admitted one starts, so the owner never runs more sessions than slots (R38)."""
    await _lose_an_admission(stack, "lost", scripted_task("Never ends.", hold_until="go"))
    workflow_id = helper_workflow_id(stack.owner, "lost")
    orphan_run = (await stack.env.client.get_workflow_handle(workflow_id).describe()).run_id

    admission = await stack.client.start(
        helper_request(stack.owner, "lost", scripted_task("Again.", steps=1, step_ms=20, final_text="Again done."))
    )

    assert admission.status is RowState.RUNNING
    orphan = stack.env.client.get_workflow_handle(workflow_id, run_id=orphan_run, result_type=HelperResult)
    assert (await orphan.describe()).status is WorkflowExecutionStatus.COMPLETED
    assert (await orphan.result()).outcome is OutcomeKind.CLOSED
    row = await eventually(functools.partial(_outcome, stack, "lost"), timeout=30)
    assert row.seq != UNRECORDED_SEQ and row.outcome_kind is OutcomeKind.COMPLETED
    # The outcome is written before the helper hands its slot back: the book frees it a moment later.
    coordinator = stack.env.client.get_workflow_handle(coordinator_id(stack.owner))

    async def slot_returned() -> dict[str, int] | None:
        counts: dict[str, int] = await coordinator.query(COUNTS, result_type=dict)
        return counts if counts["running"] == 0 else None

    counts = await eventually(slot_returned, timeout=30)
    assert counts["rows"] == 1 and counts["unreported"] == 1, counts
