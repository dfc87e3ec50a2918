"""An admitted helper whose workflow is missing when its slot comes (R4, R19): started from its row, not lost.

The chaos soak once left a row `waiting` for good with no workflow in Temporal: the coordinator's slot signal
found none, and the slot passed on. These tests take a waiting helper's workflow away on the dev server
(deleted, as if its start had been lost; terminated, as an operator would) and free a slot.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.names import helper_workflow_id
from reference_chat.server import running_chat
from reference_core.script import scripted_task
from reference_core.server import running_core
from tests.e2e.conftest import Stack, _stack
from tests.helpers import eventually, helper_request

pytestmark = pytest.mark.e2e


@pytest.fixture
async def four_open(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    """Four open helpers per owner, so a fourth waits for one of three slots."""
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, max_open=4) as built,
    ):
        yield built


async def _fill_slots_and_queue(stack: Stack) -> None:
    for n in range(3):
        await stack.client.start(helper_request(stack.owner, f"busy-{n}", scripted_task("Busy.", hold_until="go")))
    admission = await stack.client.start(
        helper_request(stack.owner, "queued", scripted_task("Queued work.", steps=1, step_ms=20, final_text="Done."))
    )
    assert admission.status is RowState.WAITING


async def _gone(stack: Stack, workflow_id: str) -> bool:
    try:
        await stack.env.client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        return error.status is RPCStatusCode.NOT_FOUND
    return False


async def _outcome(stack: Stack, helper_id: str) -> HelperRow | None:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def _free_a_slot(stack: Stack) -> None:
    answer = await stack.client.close(stack.owner, "busy-0")
    assert answer.state is RowState.CLOSED


async def test_a_waiting_helper_whose_workflow_is_missing_is_started_from_its_row(four_open: Stack) -> None:
    stack = four_open
    await _fill_slots_and_queue(stack)
    workflow_id = helper_workflow_id(stack.owner, "queued")
    run_id = (await stack.env.client.get_workflow_handle(workflow_id).describe()).run_id
    await stack.env.client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=stack.env.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        )
    )
    await eventually(functools.partial(_gone, stack, workflow_id), timeout=20)

    await _free_a_slot(stack)

    row: HelperRow = await eventually(functools.partial(_outcome, stack, "queued"), timeout=30)
    assert row.outcome_kind is OutcomeKind.COMPLETED, row
    assert "Done." in (row.summary or "")
    description = await stack.env.client.get_workflow_handle(workflow_id).describe()
    assert description.run_id != run_id  # a new run, started from the row
    assert (await description.memo())["seq"] == row.seq


async def test_a_terminated_waiting_helper_gives_its_slot_on(four_open: Stack) -> None:
    stack = four_open
    await _fill_slots_and_queue(stack)
    workflow_id = helper_workflow_id(stack.owner, "queued")
    await stack.env.client.get_workflow_handle(workflow_id).terminate("an operator removed it")

    await _free_a_slot(stack)

    # Its place is free again: a new helper is admitted and runs (three slots: busy-1, busy-2 and it).
    async def runs() -> bool:
        admission = await stack.client.start(
            helper_request(stack.owner, "next", scripted_task("Next.", steps=1, step_ms=20))
        )
        return admission.status is RowState.RUNNING or admission.status is RowState.UNREPORTED

    assert await eventually(runs, timeout=20)
    description = await stack.env.client.get_workflow_handle(workflow_id).describe()
    assert description.status is WorkflowExecutionStatus.TERMINATED  # not started again
    row = await stack.store.get(stack.owner, "queued")
    assert row is not None and row.state is RowState.CLOSED  # not "waiting" for ever
