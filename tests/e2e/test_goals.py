"""Goals: checks on a Temporal Schedule, each a helper with the Goal id, under the same admission (R30)."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from domain.messages.activities import GoalCheckResult
from domain.outcome import OutcomeKind
from protocol.errors import HelperRefused
from reference.core.script import scripted_task
from starter.goals import goal_schedule_id
from tests.e2e.conftest import Stack
from tests.helpers import eventually, helper_request, rows_of

pytestmark = pytest.mark.e2e


def _goal(stack: Stack, goal_id: str, task: str) -> dict[str, object]:
    return {"owner": stack.owner, "goal_id": goal_id, "task": task, "model": "scripted", "every_ms": 3_600_000}


async def _checks(stack: Stack, goal_id: str) -> list[WorkflowHandle[Any, Any]]:
    description = await stack.env.client.get_schedule_handle(goal_schedule_id(stack.owner, goal_id)).describe()
    return [
        stack.env.client.get_workflow_handle(action.action.workflow_id)  # type: ignore[attr-defined]
        for action in description.info.recent_actions
    ]


async def test_a_goal_check_runs_as_a_helper_with_the_goal_id(stack: Stack):
    """R30, R31: a Goal's Schedule starts a check that is admitted as a helper carrying the Goal id; it
    runs to its outcome and its usage is recorded with the model."""
    view = await stack.client.add_goal(_goal(stack, "inbox", scripted_task("Check the inbox.", steps=2, step_ms=50)))
    assert (view.goal_id, view.every_ms, view.paused) == ("inbox", 3_600_000, False)
    assert view.next_runs  # the Schedule knows when the next check is due
    await stack.client.run_goal_now(stack.owner, "inbox")
    checks = await eventually(lambda: _checks(stack, "inbox"), timeout=20)
    result = GoalCheckResult.model_validate(await checks[0].result())
    assert result.admitted and result.helper_id.startswith("inbox.")
    row = await eventually(lambda: _final_goal_row(stack, "inbox"), timeout=30)
    assert row.goal_id == "inbox" and row.outcome_kind is OutcomeKind.COMPLETED
    usage = await stack.client.usage(stack.owner)
    assert [(line.goal_id, line.model) for line in usage.helpers] == [("inbox", "scripted")]
    assert usage.by_model[0].helpers == 1 and usage.by_model[0].steps == 2

    listed = await stack.client.list_goals(stack.owner)
    assert [goal.goal_id for goal in listed] == ["inbox"]
    paused = await stack.client.pause_goal(stack.owner, "inbox", paused=True)
    assert paused.paused and paused.next_runs == []  # nothing runs while paused
    assert [goal.next_runs for goal in await stack.client.list_goals(stack.owner)] == [[]]
    resumed = await stack.client.pause_goal(stack.owner, "inbox", paused=False)
    assert not resumed.paused and resumed.next_runs
    await stack.client.remove_goal(stack.owner, "inbox")
    with pytest.raises(HelperRefused) as unknown:
        await stack.client.run_goal_now(stack.owner, "inbox")
    assert unknown.value.code == "unknown_goal"


async def _final_goal_row(stack: Stack, goal_id: str):
    rows = [row for row in await rows_of(stack.store, stack.owner) if row.goal_id == goal_id]
    return rows[0] if rows and rows[0].outcome_kind is not None else None


async def test_a_goal_check_leaves_the_last_open_place_to_the_owner(stack: Stack):
    """R30, R2: with two owner helpers open, a Goal check would take the last place, so it is refused;
    the refusal is the check's result and nothing is written."""
    long = scripted_task("Work.", end="run", steps=80, step_ms=200)
    for helper_id in ("mine-1", "mine-2"):
        await stack.client.start(helper_request(stack.owner, helper_id, long))
    await stack.client.add_goal(_goal(stack, "prices", "Watch prices."))
    await stack.client.run_goal_now(stack.owner, "prices")
    checks = await eventually(lambda: _checks(stack, "prices"), timeout=20)
    result = GoalCheckResult.model_validate(await checks[0].result())
    assert not result.admitted and result.refusal_code == "goal_needs_open_place"
    assert [row.helper_id for row in await rows_of(stack.store, stack.owner)] == ["mine-1", "mine-2"]
    # The owner's own third helper still fits.
    assert (await stack.client.start(helper_request(stack.owner, "mine-3", long))).status == "running"
    for helper_id in ("mine-1", "mine-2", "mine-3"):
        await stack.client.close(stack.owner, helper_id)
    await stack.client.remove_goal(stack.owner, "prices")
