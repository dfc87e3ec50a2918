"""An owner's Goals and their Schedules: add, list, pause, resume, run, remove."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from starter import commands
from starter.goals import GoalRemoved, GoalView
from starter.service.bodies import GoalBody
from starter.service.document import BODY, BUSY, ERRORS, NOT_FOUND, RATE_LIMITED, REFUSED
from starter.service.replies import reply
from starter.service.routes import OWNER_PREFIX, GoalId, Owner

router = APIRouter(prefix=OWNER_PREFIX, responses=ERRORS)


@router.post(
    "/goals",
    summary="goal add: create a Goal and its Schedule",
    status_code=201,
    responses={201: {"model": GoalView, "description": "the Goal and its Schedule"}, **BODY, **REFUSED, **BUSY},
    response_model=None,
)
async def add_goal(owner: Owner, body: GoalBody, request: Request) -> Response:
    fields = {"owner": owner, **body.model_dump(exclude={"every"})}
    return await reply(request, lambda: commands.add_goal(fields, body.every), body, created=lambda _: True)


@router.get(
    "/goals", summary="goal list: the owner's Goals", responses={200: {"model": list[GoalView]}, **RATE_LIMITED}
)
async def list_goals(owner: Owner, request: Request) -> Response:
    return await reply(request, lambda: commands.list_goals(owner))


@router.post("/goals/{goal_id}/pause", summary="goal pause", responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY})
async def pause_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
    return await reply(request, lambda: commands.pause_goal(owner, goal_id, paused=True))


@router.post(
    "/goals/{goal_id}/resume", summary="goal resume", responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY}
)
async def resume_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
    return await reply(request, lambda: commands.pause_goal(owner, goal_id, paused=False))


@router.post(
    "/goals/{goal_id}/run",
    summary="goal run: one check now",
    responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY},
)
async def run_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
    return await reply(request, lambda: commands.run_goal(owner, goal_id))


@router.delete(
    "/goals/{goal_id}",
    summary="goal remove: the Goal and its Schedule",
    responses={200: {"model": GoalRemoved}, **NOT_FOUND, **BUSY},
)
async def remove_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
    return await reply(request, lambda: commands.remove_goal(owner, goal_id))
