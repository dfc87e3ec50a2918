"""A raw Temporal client, without the starter, cannot make the worker touch anything outside its room (R40)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from protocol.names import CLOSE_HELPER, COORDINATOR_WORKFLOW, MARK_DELIVERED
from tests.fakes.fake_core import FakeCore
from tests.helpers import helper_request, history_events
from tests.integration.stack import time_stack


async def test_a_crafted_coordinator_start_deletes_nothing_outside_the_results_root(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R40: a coordinator started by hand whose owner is an absolute path and whose book holds an expired
    entry used to make the worker delete `<that folder>/x.1`. The input is refused before the workflow runs:
    no activity, no removal, the folder is intact."""
    scratch = tmp_path / "scratch"
    (scratch / "x.1").mkdir(parents=True)
    (scratch / "x.1" / "keep.txt").write_text("mine")
    long_ago = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    crafted = {
        "owner": str(scratch),
        "book": {
            "owner": str(scratch),
            "entries": {
                "x": {
                    "helper_id": "x",
                    "seq": 1,
                    "state": "closed",
                    "helper_writes": False,
                    "hard_ceiling_ms": 1,
                    "admitted_at": long_ago,
                    "finished_at": long_ago,
                    "keep_until": long_ago,
                }
            },
        },
    }
    async with time_stack(time_env, tmp_path, FakeCore()) as stack:
        workflow_id = "crafted-coordinator"
        await time_env.client.start_workflow(
            COORDINATOR_WORKFLOW, crafted, id=workflow_id, task_queue=stack.settings.task_queue
        )
        await asyncio.sleep(2)  # several workflow-task attempts, in real time
        events = await history_events(time_env.client, workflow_id)
        await time_env.client.get_workflow_handle(workflow_id).terminate("test over")
    kinds = {event.event_type for event in events}
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED in kinds
    assert EventType.EVENT_TYPE_MARKER_RECORDED not in kinds, "no local activity ran"
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds
    assert (scratch / "x.1" / "keep.txt").read_text() == "mine"


async def test_a_crafted_close_with_a_bad_id_is_refused(time_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """R40, R34: the close update takes a bare id from any client: a path-like one is refused by the validator
    (nothing recorded), with a short message."""
    async with time_stack(time_env, tmp_path, FakeCore()) as stack:
        await stack.client.start(helper_request("anna", "h1"))
        handle = time_env.client.get_workflow_handle("helpers/anna/coordinator")
        try:
            await handle.execute_update(CLOSE_HELPER, "../../" + "x" * 5_000)
        except Exception as error:
            message = str(getattr(error, "cause", error))
        else:
            raise AssertionError("a path-like helper id was accepted")
    assert "is not valid" in message and len(message) < 300


async def test_a_crafted_delivery_of_no_answer_is_refused(time_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """R28: only a turn that sent an answer delivers what it read; a raw client's delivery of an empty answer is
    refused by the validator with the starter's own words, and nothing is recorded."""
    async with time_stack(time_env, tmp_path, FakeCore()) as stack:
        await stack.client.start(helper_request("anna", "h1"))
        handle = time_env.client.get_workflow_handle("helpers/anna/coordinator")
        try:
            await handle.execute_update(MARK_DELIVERED, {"turn": "t-1", "answer_chars": 0})
        except Exception as error:
            message = str(getattr(error, "cause", error))
        else:
            raise AssertionError("a delivery of no answer was accepted")
        events = await history_events(time_env.client, "helpers/anna/coordinator")
    assert "the turn sent no answer" in message
    accepted = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert len(accepted) == 1, "only the admission's update is in the history"
