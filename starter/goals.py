"""Goals as Temporal Schedules: add, list, pause, resume, run now, remove (R30).

A Goal's Schedule is `helpers/<owner>/goal/<goal id>`; each action starts a GoalCheckWorkflow that admits
one check as a helper with the Goal id. Overlapping checks are skipped: a Goal never queues up behind
itself while a check still waits or runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleInfo,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from config.settings import Settings
from domain.goals import Goal
from protocol.errors import GOAL_EXISTS, UNKNOWN_GOAL, HelperRefused
from protocol.names import GOAL_CHECK_WORKFLOW, HELPER_OWNER, owner_priority
from protocol.temporal_errors import refusal_of_rpc


def goal_schedule_id(owner: str, goal_id: str) -> str:
    return f"helpers/{owner}/goal/{goal_id}"


class GoalView(BaseModel):
    owner: str
    goal_id: str
    every_ms: int
    paused: bool
    note: str = ""
    task: str
    model: str
    next_runs: list[str] = Field(
        default=[], description="when the next checks run (up to three, ISO 8601); none while the Goal is paused"
    )
    recent_checks: list[str] = []


class GoalRemoved(BaseModel):
    """`goal remove`'s answer: the Goal and its Schedule are gone."""

    owner: str
    goal_id: str
    removed: bool


async def add_goal(temporal: Client, settings: Settings, goal: Goal) -> GoalView:
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            GOAL_CHECK_WORKFLOW,
            goal,
            id=f"{goal_schedule_id(goal.owner, goal.goal_id)}/check",
            task_queue=settings.task_queue,
            typed_search_attributes=TypedSearchAttributes([SearchAttributePair(HELPER_OWNER, goal.owner)]),
            static_summary=f"Goal check of {goal.owner}/{goal.goal_id}",
            priority=owner_priority(goal.owner),
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(milliseconds=goal.every_ms))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(note=f"Goal {goal.goal_id} of {goal.owner}"),
    )
    try:
        await temporal.create_schedule(
            goal_schedule_id(goal.owner, goal.goal_id),
            schedule,
            search_attributes=TypedSearchAttributes([SearchAttributePair(HELPER_OWNER, goal.owner)]),
        )
    except ScheduleAlreadyRunningError:
        raise HelperRefused(GOAL_EXISTS, f"Goal {goal.goal_id} already exists; remove it first") from None
    except RPCError as error:
        raise refusal_of_rpc(error, "the Goal's schedule", _address(temporal)) from None
    return await describe_goal(temporal, goal.owner, goal.goal_id)


async def describe_goal(temporal: Client, owner: str, goal_id: str) -> GoalView:
    try:
        description = await temporal.get_schedule_handle(goal_schedule_id(owner, goal_id)).describe()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            raise HelperRefused(UNKNOWN_GOAL, f"There is no Goal {goal_id}.") from None
        raise refusal_of_rpc(error, "the Goal's description", _address(temporal)) from None
    action = description.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    goal = await _goal_of(temporal, action)
    return goal_view(owner, goal_id, description.schedule, description.info, goal)


def goal_view(owner: str, goal_id: str, schedule: Schedule, info: ScheduleInfo, goal: Goal | None) -> GoalView:
    """What a Goal's Schedule shows its owner. A paused Schedule still computes its next action times, but none of
    them runs until it is resumed: a paused Goal lists no next runs."""
    intervals = schedule.spec.intervals
    paused = schedule.state.paused
    return GoalView(
        owner=owner,
        goal_id=goal_id,
        every_ms=int(intervals[0].every.total_seconds() * 1000) if intervals else 0,
        paused=paused,
        note=schedule.state.note or "",
        task=goal.task if goal else "",
        model=goal.model if goal else "",
        next_runs=[] if paused else [moment.isoformat() for moment in info.next_action_times[:3]],
        recent_checks=[str(action.action.workflow_id) for action in info.recent_actions[-5:]],  # type: ignore[attr-defined]
    )


async def _goal_of(temporal: Client, action: ScheduleActionStartWorkflow) -> Goal | None:
    if not action.args:
        return None
    payload: Any = action.args[0]
    if isinstance(payload, Goal):
        return payload
    values = await temporal.data_converter.decode([payload], [Goal])
    goal = values[0]
    return goal if isinstance(goal, Goal) else None


async def list_goals(temporal: Client, owner: str) -> list[GoalView]:
    prefix = goal_schedule_id(owner, "")
    with _refused_as(temporal, "the list of schedules"):
        ids = [entry.id async for entry in await temporal.list_schedules() if entry.id.startswith(prefix)]
    return [await describe_goal(temporal, owner, schedule_id.removeprefix(prefix)) for schedule_id in sorted(ids)]


async def pause_goal(temporal: Client, owner: str, goal_id: str, *, paused: bool, note: str = "") -> GoalView:
    handle = temporal.get_schedule_handle(goal_schedule_id(owner, goal_id))
    await describe_goal(temporal, owner, goal_id)  # a clear error for an unknown Goal
    with _refused_as(temporal, "the Goal's pause or resume"):
        if paused:
            await handle.pause(note=note or "paused by the owner")
        else:
            await handle.unpause(note=note or "resumed by the owner")
    return await describe_goal(temporal, owner, goal_id)


async def run_goal_now(temporal: Client, owner: str, goal_id: str) -> GoalView:
    await describe_goal(temporal, owner, goal_id)
    with _refused_as(temporal, "the Goal's check"):
        await temporal.get_schedule_handle(goal_schedule_id(owner, goal_id)).trigger()
    return await describe_goal(temporal, owner, goal_id)


async def remove_goal(temporal: Client, owner: str, goal_id: str) -> GoalRemoved:
    """Stop future checks. Checks already admitted stay helpers; their Goal rows expire like any other."""
    await describe_goal(temporal, owner, goal_id)
    with _refused_as(temporal, "the Goal's removal"):
        await temporal.get_schedule_handle(goal_schedule_id(owner, goal_id)).delete()
    return GoalRemoved(owner=owner, goal_id=goal_id, removed=True)


@contextlib.contextmanager
def _refused_as(temporal: Client, what: str) -> Iterator[None]:
    """A Goal's schedule call that Temporal refuses answers as every write does (protocol.temporal_errors)."""
    try:
        yield
    except RPCError as error:
        raise refusal_of_rpc(error, what, _address(temporal)) from None


def _address(temporal: Client) -> str:
    """Where the client reaches Temporal, for a refusal that says it could not."""
    return temporal.service_client.config.target_host
