"""A real HTTP server on 127.0.0.1 (uvicorn) that answers each request with what a test's handler returns.

The handler takes an `httpx.Request` and returns an `httpx.Response` (or awaits one): a test states an answer
in httpx's words, and the client under test reads it from a socket, as it would read a real server's. A
response whose content is an async iterator is sent as it is produced (chunked, unless the handler gave a
Content-Length), so endless, trickling or oversized bodies really are on the wire; one that raises while it is
produced drops the connection, as a server that dies mid-answer. A body produced faster than the client reads
it fills the sockets' buffers (megabytes on loopback) before the server notices that the client went away: a
test that counts what was produced paces its body.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import uvicorn

HOST = "127.0.0.1"
Handler = Callable[[httpx.Request], httpx.Response] | Callable[[httpx.Request], Awaitable[httpx.Response]]
# Headers the server writes itself from how it sends the body.
_FRAMING = {"transfer-encoding", "connection"}
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to the test run, not to the server.
        yield


@contextlib.asynccontextmanager
async def serving_answers(handler: Handler) -> AsyncIterator[str]:
    """Serve `handler` on a free port; yield the base URL. Leaving the block stops the server and drops every
    connection still open."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan: nothing to start
        content = bytearray()
        while True:
            message = await receive()
            content += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = (scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")).decode()
        # A request in absolute form (to a proxy) names its URL whole.
        url = target if target.startswith("http") else f"http://{HOST}{target}"
        asked = httpx.Request(scope["method"], url, headers=scope["headers"], content=bytes(content))
        given = handler(asked)
        response = await given if inspect.isawaitable(given) else given
        headers = [
            (name.encode(), value.encode())
            for name, value in response.headers.multi_items()
            if name.lower() not in _FRAMING
        ]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        if isinstance(response.stream, httpx.ByteStream):  # stated as bytes: sent as given, not decoded
            await send({"type": "http.response.body", "body": b"".join(response.stream)})
            return
        # The body stops when the client goes away, as a server's write to a closed connection fails.
        gone = asyncio.create_task(_disconnected(receive))
        try:
            async for chunk in response.aiter_raw():
                if gone.done():
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            gone.cancel()
            await response.aclose()

    # The client under test is what a test watches: no access log, and an answer that fails is a dropped
    # connection, not a logged error.
    config = uvicorn.Config(app, host=HOST, port=0, log_level="critical", access_log=False, lifespan="off")
    server = _Server(config)
    task = asyncio.create_task(server.serve(), name="answering-server")
    while not server.started:
        if task.done():
            raise RuntimeError(f"the answering server did not start: {task.exception()!r}")
        await asyncio.sleep(0.005)
    try:
        yield f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = server.force_exit = True
        for connection in list(server.server_state.connections):
            connection.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
