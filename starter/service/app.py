"""The service's HTTP app: every starter command as a route, with the console script's checks, JSON bodies and
refusals (`starter.commands`, `starter.answers`), and its exit codes as HTTP statuses: each kind of error carries
both (`protocol.errors`; the table is in docs/api.md) (R42, R47).

Beyond the console script: 401 `unauthorized` without the service token, 413 `too_large` for a body over the
cap, 408 `request_timeout` for a body that did not arrive in time (`starter.service.read_timeout`). Live lines are
Server-Sent Events. docs/api.md describes it all.
"""

import asyncio
import contextlib
import hmac
import logging
import re
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.sse import EventSourceResponse, ServerSentEvent
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config.settings import ServiceSettings, Settings, release_build_id
from domain.ids import echo
from domain.rows import Admission, AnswerResult, CloseAnswer, DeliveredAnswer, HelperView, ReadAnswer, RowState
from protocol.deadlines import answer_by
from protocol.errors import (
    UNKNOWN_HELPER,
    HelperRefused,
    InvalidRequest,
    StarterError,
    Unavailable,
)
from starter import commands
from starter.answers import answer_json, error_json
from starter.commands import Command
from starter.goals import GoalRemoved, GoalView
from starter.reads import StoreReader, UsageReport
from starter.service import metrics
from starter.service.bodies import (
    GOAL_ID_SCHEMA,
    ID_SCHEMA,
    AnswerBody,
    DeliveredBody,
    EndEvent,
    ErrorBody,
    ErrorDetail,
    GoalBody,
    LineEvent,
    PendingBody,
    ReadBody,
    StartBody,
    WatchEvent,
)
from starter.service.connections import Connections
from starter.service.read_timeout import READ_TIMED_OUT
from starter.watch import Mark, contradiction, has_outcome, live_lines, scope_of

log = logging.getLogger("helper_api")

READY_CHECK_S = 2.0
RETRY_AFTER_S = "1"
# How long a live-lines client waits before it connects again (the stream's `retry:`), as long as Retry-After.
WATCH_RETRY_MS = int(RETRY_AFTER_S) * 1000
# A write's own bound answers it; this much later, the request's timeout would (it never should).
WRITE_BACKSTOP_S = 2.0
# Where the request's arrival is kept in its ASGI scope, for the bound of its answer.
ARRIVED = "helper_arrived"
# The writes that go through the gate: start, close, answer, read, delivered.
WRITES = re.compile(r"^/v1/owners/[^/]+/(helpers|helpers/[^/]+/(close|answer)|read|delivered)$")


# Path parameters, described as the console script checks them (the checks are `starter.commands`').
Owner = Annotated[str, Path(description="the owner's id", json_schema_extra=ID_SCHEMA)]
HelperId = Annotated[str, Path(description="the helper's id", json_schema_extra=ID_SCHEMA)]
GoalId = Annotated[str, Path(description="the Goal's id", json_schema_extra=GOAL_ID_SCHEMA)]


def error_response(error: StarterError, inputs: Iterable[str] = (), status: int | None = None) -> JSONResponse:
    status = status or error.http_status
    headers = None
    if status in (429, 503):
        headers = {"Retry-After": str(getattr(error, "retry_after_s", None) or RETRY_AFTER_S)}
    return JSONResponse(error_json(error, list(inputs)), status, headers=headers)


def _plain_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


Responses = dict[int | str, dict[str, Any]]
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": "seconds to wait before asking again (as the body's retry_after_s)",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def _error_doc(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error status's entry in the document: its body is always an ErrorBody."""
    return {"model": ErrorBody, "description": description, **({"headers": headers} if headers else {})}


# The statuses of every /v1 route.
ERRORS: Responses = {
    401: _error_doc(
        "unauthorized: no or a wrong service token",
        {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}},
    ),
    408: _error_doc(
        "request_timeout: the body did not arrive within HELPER_API_READ_TIMEOUT_MS; the connection closes",
        {"Connection": {"description": "close", "required": True, "schema": {"type": "string"}}},
    ),
    413: _error_doc("too_large: the body is over HELPER_API_MAX_BODY_BYTES"),
    422: _error_doc(
        "invalid_request (with `problems`, one per field): the request does not pass the starter's checks (a limit, "
        "an id, a model the core does not offer, the boundary's grammar, a watch's Last-Event-ID); nothing was "
        "written"
    ),
    500: _error_doc("invalid_configuration: the service's own settings (the codec keys)"),
    503: _error_doc(
        "unavailable: the store or Temporal did not answer or accept in time, or the service holds its most "
        "live-lines streams; nothing was taken, asking again is safe",
        RETRY_AFTER_HEADER,
    ),
}
# A route with a JSON body.
BODY: Responses = {
    400: _error_doc("invalid_request: the body is not JSON (not UTF-8, nested too deeply, a number too long to read)")
}
NOT_FOUND: Responses = {404: _error_doc("unknown_helper or unknown_goal: not one of the owner's")}
REFUSED: Responses = {
    409: _error_doc(
        "refused, nothing was written: too_many_open (with `open_ids`), rows_full, goal_needs_open_place, "
        "goal_needs_row_place, not_unreported, not_followable, goal_exists, no_coordinator; for `answer`: "
        "not_answerable, stale_question, not_offered, grant_refused"
    )
}
BUSY: Responses = {
    429: _error_doc(
        "busy: refused before anything was sent; ask again after Retry-After (it grows with the backlog)",
        RETRY_AFTER_HEADER,
    )
}
# A read through Temporal (the Goals' Schedules) is never held back by the service's own backlog, only by Temporal.
RATE_LIMITED: Responses = {
    429: _error_doc(
        "busy: Temporal refused the read over its rate limits; ask again after Retry-After", RETRY_AFTER_HEADER
    )
}
# The answers of a write that goes through Temporal's updates beyond done (R48).
WRITE: Responses = {
    202: {"model": PendingBody, "description": "accepted: Temporal took the write; its answer did not come in time"},
    **REFUSED,
    **BUSY,
}


def _frame(event: str, data: str, *, with_id: bool = False) -> dict[str, Any]:
    """One Server-Sent Event of a live-lines stream, as it is sent: its `data` is JSON text of the named schema."""
    properties: dict[str, Any] = {
        "event": {"const": event, "type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": f"#/components/schemas/{data}"},
        },
    }
    if with_id:
        properties["id"] = {"type": "string"}
    return {"type": "object", "properties": properties, "required": list(properties)}


# A live-lines stream's events as sent (OpenAPI's itemSchema for a sequential media type); WatchEvent is each parsed.
STREAM_CONTENT: dict[str, Any] = {
    "text/event-stream": {
        "itemSchema": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"retry": {"type": "integer", "minimum": 0}},
                    "required": ["retry"],
                },
                _frame("line", "LineEvent", with_id=True),
                _frame("end", "EndEvent"),
                _frame("error", "ErrorBody"),
            ]
        },
    }
}


def _referenced(parts: list[Any], schemas: dict[str, Any]) -> set[str]:
    """The component schemas these parts of the document name, and those they name in turn."""
    found: set[str] = set()
    todo = list(parts)
    while todo:
        part = todo.pop()
        if isinstance(part, dict):
            ref = part.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in found:
                    found.add(name)
                    todo.append(schemas[name])
            todo.extend(part.values())
        elif isinstance(part, list):
            todo.extend(part)
    return found


@dataclass
class ServiceState:
    """What the routes share besides the connections: whether the service stops, and the open streams."""

    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    watches: set[asyncio.Event] = field(default_factory=set)

    def stop(self) -> None:
        """Begin the shutdown: /readyz answers 503 and every live-lines stream ends with `shutdown`."""
        self.stopping.set()
        for watch in self.watches:
            watch.set()


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


class Guard:
    """Before any route: the service token on /v1 (a caller without it reads and changes nothing), and the body
    cap (the body is read up to the cap before the route sees it, so an oversized one costs no more)."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.token is not None and not self._authorized(scope):
            response = _plain_error(
                401,
                "unauthorized",
                "send the service token: Authorization: Bearer <HELPER_API_TOKEN>",
                {"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        body = bytearray()
        declared = dict(scope["headers"]).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.max_body_bytes
        while not too_large:
            message = await receive()
            if message["type"] != "http.request":
                return  # the caller went away before its body arrived
            body += message.get("body", b"")
            too_large = len(body) > self.max_body_bytes
            if not message.get("more_body", False):
                break
        if too_large:
            too_much = f"the request body is over {self.max_body_bytes} bytes (HELPER_API_MAX_BODY_BYTES)"
            await _plain_error(413, "too_large", too_much)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        given = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, credential = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token)


class Shedding:
    """Before a write's body is read: a write this process cannot expect to send within its bound is refused at
    once, 429 `busy`, so a burst costs the service a few microseconds per refusal rather than the parsing, checking
    and queueing of each request (R48). Other requests, and writes that may wait their turn, go on."""

    def __init__(self, app: ASGIApp, connections: Connections, settings: Settings) -> None:
        self.app = app
        self.connections = connections
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gate = self.connections.gate
        if gate is not None and scope["type"] == "http" and scope["method"] == "POST" and WRITES.match(scope["path"]):
            refused = gate.refusal_now(answer_by(self.settings, since=scope.get(ARRIVED)))
            if refused is not None:
                await error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Measured:
    """Requests by route template and status, and their latency (`starter.service.metrics`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        scope[ARRIVED] = time.monotonic()  # a write's bound counts from here (R48)
        status: int | None = None
        gone = False

        async def receiving() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            if status is None:  # no answer of the app's: the protocol answered 408, the caller left (499), or a fault
                status = 408 if scope.get(READ_TIMED_OUT) else 499 if gone else 500
            route = getattr(scope.get("route"), "path", metrics.UNMATCHED_ROUTE)
            metrics.REQUESTS.labels(route, scope["method"], str(status)).inc()
            metrics.REQUEST_SECONDS.labels(route, scope["method"]).observe(time.perf_counter() - began)


def _problems(error: RequestValidationError) -> list[str]:
    problems = []
    for problem in error.errors():
        if problem.get("type") == "json_invalid":  # its location is the offset, not a field
            problems.append(f"body: not JSON ({problem.get('ctx', {}).get('error', 'it does not parse')})")
            continue
        where = ".".join(str(part) for part in problem.get("loc", ())[1:]) or "body"
        problems.append(f"{where}: {problem.get('msg', 'is not valid')}")
    return problems


def _unparsed(cause: BaseException | None) -> str:
    """Why a body FastAPI could not read as JSON is not JSON (its bytes, its depth, a number's length)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not JSON in UTF-8 (a bad byte at position {cause.start})"
    if isinstance(cause, RecursionError):
        return "body: not JSON this service reads (nested too deeply)"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return f"body: not JSON this service reads (a number of more than {sys.get_int_max_str_digits()} digits)"
    return "body: not JSON"


def _inputs(request: Request, *values: Any) -> list[str]:
    """What the caller sent, so an error echoes none of it whole (`starter.answers.safe_text`)."""
    found = [str(value) for value in request.path_params.values()]
    found += [str(value) for value in request.query_params.values()]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for value in values:
        walk(value.model_dump() if hasattr(value, "model_dump") else value)
    return found


def create_app(settings: Settings, connections: Connections | None = None) -> FastAPI:
    """The app, served as `settings.service` says; `connections` (the store and Temporal) open on first use and
    close when the app stops."""
    service = settings.service
    held = connections or Connections(settings, service.store_pool_size)
    state = ServiceState()
    timeout_s = service.request_timeout_ms / 1000

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        state.stop()
        await held.aclose()

    app = FastAPI(
        title="helper-runtime starter API",
        version=release_build_id(),  # one number for the image, the build id, the API and its client
        description="Iva's helpers over HTTP: the commands of `helper-starter`, with its checks, JSON bodies and "
        "refusals; live lines as Server-Sent Events. See docs/api.md.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = state
    app.state.connections = held
    app.state.settings = settings

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = _problems(error)
        not_json = any(problem.get("type") == "json_invalid" for problem in error.errors())
        refusal = InvalidRequest("; ".join(problems[:3]), {"problems": problems})
        return error_response(refusal, _inputs(request), 400 if not_json else 422)

    @app.exception_handler(StarterError)
    async def refused(request: Request, error: StarterError) -> JSONResponse:
        return error_response(error, _inputs(request))  # a refusal before the route ran (a stream's checks)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        if error.status_code == 400:  # the body did not parse as JSON at all: an invalid request, as in `invalid`
            problem = _unparsed(error.__cause__)
            return error_response(InvalidRequest(problem, {"problems": [problem]}), _inputs(request), 400)
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        headers = dict(error.headers or {})
        if error.status_code == 405:  # every method of the path, not only those of the first route that matched
            path = request.url.path
            methods = {
                m for r in app.routes if isinstance(r, APIRoute) and r.path_regex.match(path) for m in (r.methods or ())
            }
            headers["Allow"] = ", ".join(sorted(methods))
        return _plain_error(error.status_code, code, str(error.detail), headers or None)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        kind = type(error).__name__
        return error_response(Unavailable(f"the starter failed unexpectedly ({kind}); it is safe to ask again"))

    async def answer(
        request: Request,
        build: Callable[[], Command],
        *bodies: Any,
        created: Callable[[Any], bool] | None = None,
    ) -> Response:
        """Validate (connecting to nothing), connect if need be, run, answer: the console script's steps. A write is
        answered by its own bound (HELPER_STARTER_TIMEOUT_MS from here, R48); this timeout only backs it up."""
        try:
            command = build()
            by = answer_by(settings, since=request.scope.get(ARRIVED))
            bound = by.left() + WRITE_BACKSTOP_S if command.writes else timeout_s
            async with asyncio.timeout(bound):
                client = await (held.writer() if command.writes else held.reader())
                value = await command.run(client, by)
        except StarterError as error:
            return error_response(error, _inputs(request, *bodies))
        except TimeoutError:
            return error_response(Unavailable(f"no answer within {bound:.0f} s; asking again is safe"))
        status = 201 if created is not None and created(value) else 200
        return JSONResponse(answer_json(value), status)

    v1 = APIRouter(prefix="/v1/owners/{owner}", responses=ERRORS)

    @v1.post(
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
        return await answer(
            request,
            lambda: commands.start(body.fields(owner), settings),
            body,
            created=lambda admission: not admission.existing,
        )

    @v1.get("/helpers", summary="list: the owner's helper rows", responses={200: {"model": list[HelperView]}})
    async def list_helpers(
        owner: Owner, request: Request, state: Annotated[list[RowState] | None, Query()] = None
    ) -> Response:
        """The owner's helper rows, read from the store (works while Temporal is down)."""
        states = [s.value for s in state] if state else None
        return await answer(request, lambda: commands.list_helpers(owner, states))

    @v1.get(
        "/helpers/{helper_id}",
        summary="show: one helper with its full outcome text",
        responses={200: {"model": HelperView}, **NOT_FOUND},
    )
    async def show(owner: Owner, helper_id: HelperId, request: Request) -> Response:
        return await answer(request, lambda: commands.show(owner, helper_id))

    @v1.post(
        "/helpers/{helper_id}/close",
        summary="close a helper (running, ready or delivered)",
        responses={200: {"model": CloseAnswer}, **NOT_FOUND, **WRITE},
    )
    async def close(owner: Owner, helper_id: HelperId, request: Request) -> Response:
        """A running helper keeps its slot until the core confirms the stop (R7, R21)."""
        return await answer(request, lambda: commands.close(owner, helper_id))

    @v1.post(
        "/helpers/{helper_id}/answer",
        summary="answer a helper's question or authorization wait, once",
        responses={200: {"model": AnswerResult}, **BODY, **NOT_FOUND, **WRITE},
    )
    async def answer_question(owner: Owner, helper_id: HelperId, body: AnswerBody, request: Request) -> Response:
        """The first valid answer is the only one: it admits the follow-up `<helper_id>.answer` (none for deny);
        any later answer gets it back (`repeated`, and `same` says whether it is this one) and starts nothing
        (R49)."""
        return await answer(
            request, lambda: commands.answer(owner, helper_id, body.question_id, body.option_id, body.text), body
        )

    @v1.get(
        "/unreported",
        summary="unreported: finalized outcomes not yet delivered",
        responses={200: {"model": list[HelperView]}},
    )
    async def unreported(owner: Owner, request: Request) -> Response:
        """For the chat's next instruction, from the store alone (R27)."""
        return await answer(request, lambda: commands.unreported(owner))

    @v1.post(
        "/read",
        summary="read: a chat turn read these outcomes",
        responses={200: {"model": ReadAnswer}, **BODY, **NOT_FOUND, **WRITE},
    )
    async def read(owner: Owner, body: ReadBody, request: Request) -> Response:
        """Before the turn answers; nothing is delivered yet (R28)."""
        return await answer(request, lambda: commands.read(owner, body.turn, body.helper_ids), body)

    @v1.post(
        "/delivered",
        summary="delivered: the turn answered and completed",
        responses={200: {"model": DeliveredAnswer}, **BODY, **WRITE},
    )
    async def delivered(owner: Owner, body: DeliveredBody, request: Request) -> Response:
        """The turn sent a nonempty answer and completed: what it read is delivered (R28)."""
        return await answer(request, lambda: commands.delivered(owner, body.turn, body.answer_chars), body)

    @v1.get("/usage", summary="usage per helper and per model", responses={200: {"model": UsageReport}})
    async def usage(owner: Owner, request: Request) -> Response:
        return await answer(request, lambda: commands.usage(owner))

    @v1.post(
        "/goals",
        summary="goal add: create a Goal and its Schedule",
        status_code=201,
        responses={201: {"model": GoalView, "description": "the Goal and its Schedule"}, **BODY, **REFUSED, **BUSY},
        response_model=None,
    )
    async def add_goal(owner: Owner, body: GoalBody, request: Request) -> Response:
        fields = {"owner": owner, **body.model_dump(exclude={"every"})}
        return await answer(request, lambda: commands.add_goal(fields, body.every), body, created=lambda _: True)

    @v1.get(
        "/goals", summary="goal list: the owner's Goals", responses={200: {"model": list[GoalView]}, **RATE_LIMITED}
    )
    async def list_goals(owner: Owner, request: Request) -> Response:
        return await answer(request, lambda: commands.list_goals(owner))

    @v1.post("/goals/{goal_id}/pause", summary="goal pause", responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY})
    async def pause_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
        return await answer(request, lambda: commands.pause_goal(owner, goal_id, paused=True))

    @v1.post(
        "/goals/{goal_id}/resume", summary="goal resume", responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY}
    )
    async def resume_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
        return await answer(request, lambda: commands.pause_goal(owner, goal_id, paused=False))

    @v1.post(
        "/goals/{goal_id}/run",
        summary="goal run: one check now",
        responses={200: {"model": GoalView}, **NOT_FOUND, **BUSY},
    )
    async def run_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
        return await answer(request, lambda: commands.run_goal(owner, goal_id))

    @v1.delete(
        "/goals/{goal_id}",
        summary="goal remove: the Goal and its Schedule",
        responses={200: {"model": GoalRemoved}, **NOT_FOUND, **BUSY},
    )
    async def remove_goal(owner: Owner, goal_id: GoalId, request: Request) -> Response:
        return await answer(request, lambda: commands.remove_goal(owner, goal_id))

    # --- live lines --------------------------------------------------------------------------------------

    async def watch_of(owner: str, helper_id: str | None, once: bool, resumed: Resumed) -> Watch:
        """Checked and connected before the stream begins, so a refusal is still one JSON object."""
        try:
            commands.watch(owner, helper_id)
            mark = mark_of(owner, helper_id, resumed)
            if state.stopping.is_set() or len(state.watches) >= service.max_watches:
                raise Unavailable(f"the service holds {len(state.watches)} live-lines streams; connect again later")
            async with asyncio.timeout(timeout_s):
                reader = await held.reader()
                # A watch that has said nothing of the helper yet is of no helper if its row is not there; one
                # resumed after its lines goes on, to say the row is gone and end.
                if mark.count == 0 and helper_id is not None and await reader.store.get(owner, helper_id) is None:
                    raise HelperRefused(UNKNOWN_HELPER, f"There is no helper {helper_id}.")
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
        owner: Owner,
        resumed: Annotated[Resumed, Depends(resumed_from)],
        helper_id: Annotated[
            str | None, Query(description="only this helper, until it has its outcome", json_schema_extra=ID_SCHEMA)
        ] = None,
        once: bool = False,
    ) -> Watch:
        return await watch_of(owner, helper_id, once, resumed)

    async def helper_watch(
        owner: Owner, helper_id: HelperId, resumed: Annotated[Resumed, Depends(resumed_from)], once: bool = False
    ) -> Watch:
        return await watch_of(owner, helper_id, once, resumed)

    async def stream(watch: Watch) -> AsyncIterator[ServerSentEvent]:
        ended = asyncio.Event()
        state.watches.add(ended)
        metrics.WATCHES.inc()
        timer = asyncio.get_running_loop().call_later(service.watch_max_ms / 1000, ended.set)
        try:
            yield ServerSentEvent(retry=WATCH_RETRY_MS)
            try:
                lines = live_lines(
                    watch.reader, watch.owner, watch.helper_id, once=watch.once, stop=ended, mark=watch.mark
                )
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
            if state.stopping.is_set():
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
            yield ServerSentEvent(
                event="end", data=EndEvent(reason=reason, outcome_kind=outcome).model_dump(mode="json")
            )
        finally:
            timer.cancel()
            state.watches.discard(ended)
            metrics.WATCHES.dec()

    sse_doc: Responses = {
        200: {
            "description": "text/event-stream: `retry: 1000` first, `event: line` (a LineEvent, with its `id:`) for "
            "each change, `event: end` (an EndEvent) last, `event: error` (an ErrorBody) when the store stops "
            "answering; `: ping` comments keep an idle stream open. WatchEvent names each event parsed",
        }
    }

    @v1.get(
        "/watch",
        summary="watch: live lines of the owner's helpers",
        response_class=EventSourceResponse,
        responses={**sse_doc, **NOT_FOUND},
    )
    async def watch_owner(watch: Annotated[Watch, Depends(owner_watch)]) -> AsyncIterable[ServerSentEvent]:
        """Until the caller goes away (or HELPER_API_WATCH_MAX_MS); with `helper_id`, until that helper has its
        outcome; with `once`, the current lines."""
        async for event in stream(watch):
            yield event

    @v1.get(
        "/helpers/{helper_id}/watch",
        summary="watch one helper until it has its outcome",
        response_class=EventSourceResponse,
        responses={**sse_doc, **NOT_FOUND},
    )
    async def watch_helper(watch: Annotated[Watch, Depends(helper_watch)]) -> AsyncIterable[ServerSentEvent]:
        """Ends by itself once the helper has its outcome, as `helper-starter watch --id` does."""
        async for event in stream(watch):
            yield event

    app.include_router(v1)

    def openapi() -> dict[str, Any]:
        """FastAPI's document, as precise as a generated client needs it (client-typescript/): every error an
        ErrorBody, a live-lines stream's events and their schemas (which no route names as a body), and every field
        of an answer required."""
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
            operations = [operation for item in document["paths"].values() for operation in item.values()]
            for operation in operations:
                for status, response in operation["responses"].items():
                    if int(status) >= 400:  # an error is JSON, a live-lines stream's too
                        response["content"] = error_body
                if "text/event-stream" in operation["responses"].get("200", {}).get("content", {}):
                    operation["responses"]["200"]["content"] = STREAM_CONTENT
            events = TypeAdapter(WatchEvent).json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(events.pop("$defs", {}))
            schemas["WatchEvent"] = {
                **events,
                "description": "one live-lines event as a client holds it, its `data` parsed as JSON",
            }
            asked = _referenced(
                [operation["requestBody"] for operation in operations if "requestBody" in operation], schemas
            )
            for name, schema in schemas.items():
                # An answer is its model's whole JSON (`answer_json`): every field is there, null or not; an error
                # leaves out the details that do not apply.
                if name not in asked and name != ErrorDetail.__name__ and "properties" in schema:
                    schema["required"] = list(schema["properties"])
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # --- probes and metrics: no token, no owner data ---------------------------------------------------

    @app.get("/livez", include_in_schema=False)
    async def livez() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Ready while the store answers: the reads need nothing else. Temporal is reported, not required."""
        status: dict[str, Any] = {"ok": True, "temporal_connected": held.temporal_connected}
        try:
            if state.stopping.is_set():
                raise Unavailable("the service is stopping")
            async with asyncio.timeout(READY_CHECK_S):
                reader = await held.reader()
                await reader.store.ping()
        except (StarterError, TimeoutError, OSError) as error:
            status.update(ok=False, store=str(error) or "no answer within 2 s")
            return JSONResponse(status, 503)
        return JSONResponse(status)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app


def with_guards(app: FastAPI, service: ServiceSettings) -> ASGIApp:
    """The app behind its guard (token, body cap), the shedding of writes it cannot answer in time, and its
    measurements: what uvicorn serves."""
    guarded = Guard(app, service.token, service.max_body_bytes)
    return Measured(Shedding(guarded, app.state.connections, app.state.settings))
