"""Live lines as Server-Sent Events: an owner's helpers, or one helper until it has its outcome, resumable from
the last line a client has (Last-Event-ID). A watch is checked and connected before its stream begins, so a refusal
is still one JSON object; the service holds at most HELPER_API_MAX_WATCHES streams, each for at most
HELPER_API_WATCH_MAX_MS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from domain.ids import echo
from protocol.errors import InvalidRequest, StarterError, Unavailable, unknown_helper
from starter import commands
from starter.output import error_json
from starter.reads import StoreReader
from starter.service import metrics
from starter.service.bodies import ID_SCHEMA, EndEvent, LineEvent
from starter.service.context import ServiceState, service_of
from starter.service.document import ERRORS, LIVE_LINES, NOT_FOUND
from starter.service.replies import RETRY_AFTER_S
from starter.service.routes import OWNER_PREFIX, HelperId, Owner
from starter.watch import Mark, contradiction, has_outcome, live_lines, scope_of

# How long a client waits before it connects again (the stream's `retry:`), as long as Retry-After.
WATCH_RETRY_MS = int(RETRY_AFTER_S) * 1000

router = APIRouter(prefix=OWNER_PREFIX, responses=ERRORS)


@dataclass(frozen=True)
class Watch:
    """A live-lines stream's request, checked, with the reader it polls."""

    owner: str
    helper_id: str | None
    once: bool
    reader: StoreReader
    mark: Mark  # where it begins: a fresh watch's, or the one a resumed watch's last line id names


@dataclass(frozen=True)
class Resumed:
    """The last line id a client names, and where it named it (a refusal says which)."""

    last_event_id: str | None
    named_in: str


def mark_of(owner: str, helper_id: str | None, resumed: Resumed) -> Mark:
    """Where a watch begins: fresh, or after the line whose id the client names (InvalidRequest, nothing streamed,
    when it names none of this watch's lines)."""
    scope = scope_of(owner, helper_id)
    if resumed.last_event_id is None:
        return Mark(0, scope)
    try:
        return Mark.parse(resumed.last_event_id, scope)
    except ValueError as error:
        raise no_line(resumed, str(error)) from None


def no_line(resumed: Resumed, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"{resumed.named_in} {echo(resumed.last_event_id)} names no line of this watch: {why}; watch again without "
        "it to start afresh"
    )


async def watch_of(service: ServiceState, owner: str, helper_id: str | None, once: bool, resumed: Resumed) -> Watch:
    """Checked and connected before the stream begins, so a refusal is still one JSON object."""
    timeout_s = service.settings.service.request_timeout_ms / 1000
    try:
        commands.watch(owner, helper_id)
        mark = mark_of(owner, helper_id, resumed)
        if service.stopping.is_set() or len(service.watches) >= service.settings.service.max_watches:
            raise Unavailable(f"the service holds {len(service.watches)} live-lines streams; connect again later")
        async with asyncio.timeout(timeout_s):
            reader = await service.connections.reader()
            # A watch that has said nothing of the helper yet is of no helper if its row is not there; one
            # resumed after its lines goes on, to say the row is gone and end.
            if mark.count == 0 and helper_id is not None and await reader.store.get(owner, helper_id) is None:
                raise unknown_helper(helper_id)
            if mark.count > 0 and (why := contradiction(mark, await reader.list_helpers(owner))) is not None:
                raise no_line(resumed, why)
    except TimeoutError:
        raise Unavailable(f"the store did not answer within {timeout_s:g} s") from None
    return Watch(owner, helper_id, once, reader, mark)


async def resumed_from(
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="the id of the last line the client has: the stream sends the lines after it (what an "
            "EventSource sends when it connects again); it wins over `last_event_id`",
        ),
    ] = None,
    last_event_id_query: Annotated[
        str | None,
        Query(
            alias="last_event_id",
            description="the same, for a client that cannot set the header",
        ),
    ] = None,
) -> Resumed:
    if last_event_id is not None:
        return Resumed(last_event_id, "the Last-Event-ID header")
    if last_event_id_query is not None:
        return Resumed(last_event_id_query, "the query parameter last_event_id")
    return Resumed(None, "")


async def owner_watch(
    request: Request,
    owner: Owner,
    resumed: Annotated[Resumed, Depends(resumed_from)],
    helper_id: Annotated[
        str | None, Query(description="only this helper, until it has its outcome", json_schema_extra=ID_SCHEMA)
    ] = None,
    once: bool = False,
) -> Watch:
    return await watch_of(service_of(request), owner, helper_id, once, resumed)


async def helper_watch(
    request: Request,
    owner: Owner,
    helper_id: HelperId,
    resumed: Annotated[Resumed, Depends(resumed_from)],
    once: bool = False,
) -> Watch:
    return await watch_of(service_of(request), owner, helper_id, once, resumed)


async def stream(service: ServiceState, watch: Watch) -> AsyncIterator[ServerSentEvent]:
    ended = asyncio.Event()
    service.watches.add(ended)
    metrics.WATCHES.inc()
    timer = asyncio.get_running_loop().call_later(service.settings.service.watch_max_ms / 1000, ended.set)
    try:
        yield ServerSentEvent(retry=WATCH_RETRY_MS)
        try:
            lines = live_lines(watch.reader, watch.owner, watch.helper_id, once=watch.once, stop=ended, mark=watch.mark)
            async for line in lines:
                event = LineEvent(
                    at=line.at,
                    owner=watch.owner,
                    helper_id=line.helper_id,
                    state=line.state,
                    text=line.text,
                    choices=line.choices,
                )
                yield ServerSentEvent(event="line", data=event.model_dump(mode="json"), id=line.id)
        except StarterError as error:
            yield ServerSentEvent(event="error", data=error_json(error, [watch.owner, watch.helper_id or ""]))
            return
        reason: Any
        outcome = None
        if service.stopping.is_set():
            reason = "shutdown"
        elif ended.is_set():
            reason = "time"
        elif watch.once:
            reason = "once"
        else:
            views = await watch.reader.list_helpers(watch.owner)
            views = [view for view in views if view.helper_id == watch.helper_id]
            reason = "outcome" if views else "removed"
            outcome = views[0].outcome_kind if has_outcome(views) else None
        yield ServerSentEvent(event="end", data=EndEvent(reason=reason, outcome_kind=outcome).model_dump(mode="json"))
    finally:
        timer.cancel()
        service.watches.discard(ended)
        metrics.WATCHES.dec()


@router.get(
    "/watch",
    summary="watch: live lines of the owner's helpers",
    response_class=EventSourceResponse,
    responses={**LIVE_LINES, **NOT_FOUND},
)
async def watch_owner(
    request: Request, watch: Annotated[Watch, Depends(owner_watch)]
) -> AsyncIterable[ServerSentEvent]:
    """Until the caller goes away (or HELPER_API_WATCH_MAX_MS); with `helper_id`, until that helper has its
    outcome; with `once`, the current lines."""
    async for event in stream(service_of(request), watch):
        yield event


@router.get(
    "/helpers/{helper_id}/watch",
    summary="watch one helper until it has its outcome",
    response_class=EventSourceResponse,
    responses={**LIVE_LINES, **NOT_FOUND},
)
async def watch_helper(
    request: Request, watch: Annotated[Watch, Depends(helper_watch)]
) -> AsyncIterable[ServerSentEvent]:
    """Ends by itself once the helper has its outcome, as `helper-starter watch --id` does."""
    async for event in stream(service_of(request), watch):
        yield event
