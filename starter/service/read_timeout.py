"""The bound on receiving a request (HELPER_API_READ_TIMEOUT_MS): uvicorn's HTTP/1.1 protocol with a read timeout.

uvicorn bounds the wait between two requests on a kept-alive connection (`timeout_keep_alive`), not the wait for a
request's own bytes: a client that sends half a request line, half its headers or half its body would hold its
connection, and a file descriptor, for as long as it likes. Here each request must arrive whole within the bound.
Its clock starts when the connection opens (the first request) or at its first byte (a later request on a
kept-alive connection) and stops once its last byte is in, so a slow answer or a long live-lines stream is not
bounded by it. At the bound the connection is closed; a request whose headers had arrived and that nothing has
answered yet is answered 408 `request_timeout` first, and the route waiting for its body reads a disconnect.

A bound that comes due while the service's own event loop was held up (a burst of requests, a pause) is moved on
by the time it was late: the bytes may be waiting, unread, in the socket, and the service, not the client, was slow.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

# A bound that comes due later than this was held up by the service's own loop.
LATE_S = 0.05
# Set in a request's ASGI scope when this protocol answered it 408: the app never sent that answer itself.
READ_TIMED_OUT = "helper_read_timed_out"


class ReadTimeoutConfig(uvicorn.Config):
    """uvicorn's configuration, serving HTTP/1.1 with `ReadTimeoutH11Protocol` and its bound."""

    def __init__(self, app: Any, *, read_timeout_s: float, **options: Any) -> None:
        super().__init__(app, http=ReadTimeoutH11Protocol, **options)
        self.read_timeout_s = read_timeout_s


class ReadTimeoutH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 connection, closed when a request has not arrived whole within `read_timeout_s`."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if not isinstance(config, ReadTimeoutConfig):
            raise TypeError("ReadTimeoutH11Protocol is served with a ReadTimeoutConfig, which holds its bound")
        self.read_timeout_s = config.read_timeout_s
        self.read_timer: asyncio.TimerHandle | None = None
        self.read_due = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # the first request's clock starts with the connection

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of a later request
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            self._arm()  # still arriving; also a pipelined request taken up once the one before it was answered
        elif state is not h11.IDLE:
            self._disarm()  # in whole (or the connection is over)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float | None = None) -> None:
        if self.read_timer is None:
            seconds = self.read_timeout_s if seconds is None else seconds
            self.read_due = self.loop.time() + seconds
            self.read_timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def _timed_out(self) -> None:
        self.read_timer = None
        late = self.loop.time() - self.read_due
        if late > LATE_S:
            self._arm(late)  # the loop was held up: the client gets that time back
            return
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self.conn.their_state is h11.SEND_BODY and cycle is not None and not cycle.response_started:
            # The headers are in, the body is not: the route reads a disconnect and anything it sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
            cycle.scope[READ_TIMED_OUT] = True  # type: ignore[literal-required]
            self.transport.write(self._request_timeout())
        self.transport.close()

    def _request_timeout(self) -> bytes:
        """A 408 in the service's error form, with `Connection: close`."""
        message = (
            f"the request did not arrive whole within {self.read_timeout_s * 1000:g} ms (HELPER_API_READ_TIMEOUT_MS)"
        )
        body = json.dumps({"error": {"code": "request_timeout", "message": message}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        events: list[h11.Event] = [
            h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ]
        return b"".join(self.conn.send(event) or b"" for event in events)
