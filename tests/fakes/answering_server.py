"""A real HTTP server on 127.0.0.1 that answers each request with what a test's handler returns.

The handler takes an `httpx.Request` and returns an `httpx.Response` (or awaits one): a test states an answer
in httpx's words, and the client under test reads it from a socket, as it would read a real server's. A
response whose content is an async iterator is sent as it is produced (chunked, unless the handler gave a
Content-Length), so endless, trickling or oversized bodies really are on the wire. A body produced faster than
the client reads it fills the sockets' buffers (megabytes on loopback) before the server notices that the
client went away: a test that counts what was produced paces its body.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from aiohttp import web

HOST = "127.0.0.1"
Handler = Callable[[httpx.Request], httpx.Response] | Callable[[httpx.Request], Awaitable[httpx.Response]]
# Headers the server writes itself from how it sends the body.
_FRAMING = {"transfer-encoding", "connection"}


@contextlib.asynccontextmanager
async def serving_answers(handler: Handler) -> AsyncIterator[str]:
    """Serve `handler` on a free port; yield the base URL. Leaving the block stops the server and drops every
    connection still open."""

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        asked = httpx.Request(
            request.method,
            f"http://{HOST}{request.raw_path}",
            headers=list(request.raw_headers),
            content=await request.read(),
        )
        given = handler(asked)
        response = await given if inspect.isawaitable(given) else given
        sent = web.StreamResponse(status=response.status_code)
        for name, value in response.headers.multi_items():
            if name.lower() not in _FRAMING:
                sent.headers.add(name, value)
        declared = "content-length" in response.headers
        if not declared:
            sent.enable_chunked_encoding()
        await sent.prepare(request)
        if isinstance(response.stream, httpx.ByteStream):  # stated as bytes: sent as given, not decoded
            await sent.write(b"".join(response.stream))
        else:
            async for chunk in response.aiter_raw():
                await sent.write(chunk)
        await sent.write_eof()
        return sent

    server = web.Server(answer, access_log=None)  # the client under test is what a test watches
    runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://{HOST}:{port}"
    finally:
        await runner.cleanup()
