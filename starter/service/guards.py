"""What stands before the routes, in the order a request meets them: its measurement (requests by route and
status, their latency, the moment it arrived), the shedding of writes this process cannot send within their bound,
and the guard of /v1 (the service token, the body cap). `starter.service.app.with_guards` stacks them."""

from __future__ import annotations

import hmac
import re
import time

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config.settings import Settings
from contracts.http_service import BodyTooLarge, plain_error, read_capped, too_large
from protocol.deadlines import reply_by
from starter.service import metrics
from starter.service.connections import Connections
from starter.service.context import ARRIVED
from starter.service.read_timeout import READ_TIMED_OUT
from starter.service.replies import error_response

# The writes that go through the gate: start, close, answer, read, delivered.
WRITES = re.compile(r"^/v1/owners/[^/]+/(helpers|helpers/[^/]+/(close|answer)|read|delivered)$")


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
            response = plain_error(
                401,
                "unauthorized",
                "send the service token: Authorization: Bearer <HELPER_API_TOKEN>",
                {"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        try:
            body = await read_capped(scope, receive, self.max_body_bytes)
        except BodyTooLarge:
            await too_large(self.max_body_bytes, "HELPER_API_MAX_BODY_BYTES")(scope, receive, send)
            return
        except ClientDisconnect:
            return  # the caller went away before its body arrived
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
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
            refused = gate.refusal_now(reply_by(self.settings, since=scope.get(ARRIVED)))
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
