"""An owner's helpers, and the chat's side: start, list, show, close, answer, unreported, waits, read, delivered, idle,
usage."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from domain.audit import AuditPage, OwnerWait
from domain.messages.updates import (
    Admission,
    AnswerResult,
    AnswersResult,
    ChatIdleAnswer,
    CloseAnswer,
    Decider,
    DeliveredAnswer,
    ReadAnswer,
)
from domain.rows import HelperView, RowState
from starter import commands
from starter.reads import UsageReport
from starter.service.bodies import AnswerBody, AnswersBody, DeliveredBody, ReadBody, StartBody
from starter.service.context import service_of
from starter.service.document import BODY, ERRORS, NOT_FOUND, WRITE
from starter.service.replies import reply
from starter.service.routes import OWNER_PREFIX, HelperId, Owner

router = APIRouter(prefix=OWNER_PREFIX, responses=ERRORS)


@router.post(
    "/helpers",
    summary="start: admit a helper",
    status_code=201,
    responses={
        201: {"model": Admission, "description": "admitted: running, or waiting for a slot (`ahead`)"},
        200: {"model": Admission, "description": "the helper existed (`existing`: true)"},
        **BODY,
        **NOT_FOUND,  # a follow_up of no helper of the owner's
        **WRITE,
    },
    response_model=None,
)
async def start(owner: Owner, body: StartBody, request: Request) -> Response:
    """Admit a helper; asking again with the same helper_id is harmless (200 with `existing`). When this
    answers, the row exists and the helper's workflow runs (R4)."""
    return await reply(
        request,
        lambda: commands.start(body.fields(owner), service_of(request).settings),
        body,
        created=lambda admission: not admission.existing,
    )


@router.get("/helpers", summary="list: the owner's helper rows", responses={200: {"model": list[HelperView]}})
async def list_helpers(
    owner: Owner, request: Request, state: Annotated[list[RowState] | None, Query()] = None
) -> Response:
    """The owner's helper rows, read from the store (works while Temporal is down)."""
    states = [s.value for s in state] if state else None
    return await reply(request, lambda: commands.list_helpers(owner, states))


@router.get(
    "/helpers/{helper_id}",
    summary="show: one helper with its full outcome text",
    responses={200: {"model": HelperView}, **NOT_FOUND},
)
async def show(owner: Owner, helper_id: HelperId, request: Request) -> Response:
    return await reply(request, lambda: commands.show(owner, helper_id))


@router.post(
    "/helpers/{helper_id}/close",
    summary="close a helper (running, ready or delivered)",
    responses={200: {"model": CloseAnswer}, **NOT_FOUND, **WRITE},
)
async def close(owner: Owner, helper_id: HelperId, request: Request) -> Response:
    """A running helper keeps its slot until the core confirms the stop (R7, R21)."""
    return await reply(request, lambda: commands.close(owner, helper_id))


@router.post(
    "/helpers/{helper_id}/answer",
    summary="answer a helper's question or authorization wait, once",
    responses={200: {"model": AnswerResult}, **BODY, **NOT_FOUND, **WRITE},
)
async def answer_question(owner: Owner, helper_id: HelperId, body: AnswerBody, request: Request) -> Response:
    """The first valid answer is the only one: it admits the follow-up `<helper_id>.answer` (none for deny);
    any later answer gets it back (`repeated`, and `same` says whether it is this one) and starts nothing
    (R49)."""
    return await reply(
        request,
        lambda: commands.answer(
            owner,
            helper_id,
            body.question_id,
            body.option_id,
            body.text,
            Decider(by=body.by, via=body.via, through="api"),
        ),
        body,
    )


@router.get(
    "/unreported",
    summary="unreported: finalized outcomes not yet delivered",
    responses={200: {"model": list[HelperView]}},
)
async def unreported(owner: Owner, request: Request) -> Response:
    """For the chat's next instruction, from the store alone (R27)."""
    return await reply(request, lambda: commands.unreported(owner))


@router.post(
    "/waits/answers",
    summary="answers: several answers at once, each judged alone as answer judges it",
    responses={200: {"model": AnswersResult}, **BODY, **WRITE},
)
async def answer_waits(owner: Owner, body: AnswersBody, request: Request) -> Response:
    """Up to 20 answers, each with its own result or error in the order sent; one refused changes nothing of
    another, and asking again is harmless (the repeated ones answer `repeated: true`) (R56)."""
    fields = body.model_dump(exclude_none=True)
    return await reply(request, lambda: commands.answers(owner, fields, "api"), body)


@router.get(
    "/waits",
    summary="waits: every wait of the owner's that still takes an answer",
    responses={200: {"model": list[OwnerWait]}},
)
async def waits(owner: Owner, request: Request) -> Response:
    """Questions and authorization waits across helpers, from the store alone (R56)."""
    return await reply(request, lambda: commands.waits(owner))


@router.post(
    "/read",
    summary="read: a chat turn read these outcomes",
    responses={200: {"model": ReadAnswer}, **BODY, **NOT_FOUND, **WRITE},
)
async def read(owner: Owner, body: ReadBody, request: Request) -> Response:
    """Before the turn answers; nothing is delivered yet (R28)."""
    return await reply(request, lambda: commands.read(owner, body.turn, body.helper_ids), body)


@router.post(
    "/delivered",
    summary="delivered: the turn answered and completed",
    responses={200: {"model": DeliveredAnswer}, **BODY, **WRITE},
)
async def delivered(owner: Owner, body: DeliveredBody, request: Request) -> Response:
    """The turn sent a nonempty answer and completed: what it read is delivered (R28)."""
    return await reply(request, lambda: commands.delivered(owner, body.turn, body.answer_chars), body)


@router.post(
    "/idle",
    summary="idle: the owner's chat turned idle; a waiting system event is offered now",
    responses={200: {"model": ChatIdleAnswer}, **WRITE},
)
async def chat_idle(owner: Owner, request: Request) -> Response:
    """The chat calls this when the owner's chat turns idle (a turn ended) and when it answers again after being
    down: an event waiting for it is offered within seconds instead of after the backoff. Answers `told: false`
    without touching Temporal when no event waits."""
    return await reply(request, lambda: commands.chat_idle(owner))


@router.get(
    "/audit",
    summary="audit: the records of the owner's waits that ended, newest first",
    responses={200: {"model": AuditPage}},
)
async def audit(
    owner: Owner,
    request: Request,
    helper_id: Annotated[str | None, Query(description="only this helper's records")] = None,
    before: Annotated[str | None, Query(description="the `next` token of the page before")] = None,
    limit: Annotated[int, Query(description="records in a page (1-200)")] = 50,
) -> Response:
    """Each wait's record: how it ended, who answered and through what, what was shown and its digest (R56)."""
    return await reply(request, lambda: commands.audit(owner, helper_id, before, limit))


@router.get("/usage", summary="usage per helper and per model", responses={200: {"model": UsageReport}})
async def usage(owner: Owner, request: Request) -> Response:
    return await reply(request, lambda: commands.usage(owner))
