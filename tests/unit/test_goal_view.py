"""R30: what `goal list` (and GET /goals) shows of a Goal's Schedule. Temporal still computes a paused Schedule's
next action times; none of them runs until it is resumed, so a paused Goal lists no next runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleInfo,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleState,
)

from domain.goals import Goal
from starter.goals import goal_view

NOW = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
GOAL = Goal(owner="anna", goal_id="inbox", task="Check the inbox for invoices", model="scripted", every_ms=3_600_000)
NEXT = [NOW + timedelta(hours=hours) for hours in range(1, 11)]  # what the server computes, paused or not


def _view(*, paused: bool) -> list[str]:
    schedule = Schedule(
        action=ScheduleActionStartWorkflow("GoalCheckWorkflow", GOAL, id="check", task_queue="helpers"),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
        state=ScheduleState(note="paused by the owner" if paused else "resumed by the owner", paused=paused),
    )
    info = ScheduleInfo(
        num_actions=0,
        num_actions_missed_catchup_window=0,
        num_actions_skipped_overlap=0,
        running_actions=[],
        recent_actions=[],
        next_action_times=NEXT,
        created_at=NOW,
        last_updated_at=NOW,
    )
    view = goal_view("anna", "inbox", schedule, info, GOAL)
    assert (view.goal_id, view.every_ms, view.paused, view.task) == ("inbox", 3_600_000, paused, GOAL.task)
    return view.next_runs


@pytest.mark.parametrize("paused", [False, True])
def test_a_goal_lists_its_next_three_runs_and_none_while_paused(paused: bool) -> None:
    expected = [] if paused else [moment.isoformat() for moment in NEXT[:3]]
    assert _view(paused=paused) == expected
