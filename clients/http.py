"""What the worker's HTTP clients (core, chat) share: one httpx client per peer, configured here and nowhere else.

Every setting is explicit: the environment's proxy variables and ~/.netrc are not read (`trust_env=False`); a proxy
comes from the settings (HELPER_CORE_PROXY, HELPER_CHAT_PROXY). Redirects are not followed. No httpx timeout is
set but the connect bound a caller asks for: each call is bounded as a whole by its caller (`asyncio.timeout`),
body included, which per-read timeouts cannot do.

Under the httpx client, a direct connection speaks HTTP/1.1 with h11 (httpx's own parser) on asyncio's streams
(`H11Transport`), one connection per call under way, kept alive between calls. Measured goal: an idle follow's long
poll, the worker's most frequent call, costs the least CPU and holds the fewest objects a collection scans, at
thousands per replica (python -m tools.bench.capacity, python -m tools.bench.http_pool); httpcore's pool, with its
anyio cancel scopes and locks per call, took over half the worker's CPU there. Through a proxy, httpx's own
transport (httpcore) is used, with one pool.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import h11
import httpx

# How long an idle connection is kept for the next call. Below the 5 s that common servers (uvicorn, nginx's
# upstreams) keep theirs, so a client seldom reuses one the server is closing at that moment.
KEEPALIVE_S = 4.0
# What one read from a socket takes at most; and the most a response's head (status line and headers) may hold.
READ_BYTES = 64 * 1024
HEAD_MAX_BYTES = 64 * 1024


def peer_client(*, connections: int, proxy: str | None, connect_s: float | None = None) -> httpx.AsyncClient:
    """The client of one peer: at most `connections` calls under way at once (the worker's slots that call this
    peer, each one call at a time), each on a connection of its own."""
    tls = ssl.create_default_context()  # one for every connection: each load costs tens of milliseconds
    transport: httpx.AsyncBaseTransport
    if proxy is None:
        transport = H11Transport(tls, keep=connections)
    else:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=connections, keepalive_expiry=KEEPALIVE_S)
        transport = httpx.AsyncHTTPTransport(verify=tls, limits=limits, proxy=proxy, trust_env=False)
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(None, connect=connect_s),
        trust_env=False,
        follow_redirects=False,
    )


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_MAX_BYTES)
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Idle, not expired, and not closed by the server meanwhile (its close was read as end of stream)."""
        return now - self.idle_since < KEEPALIVE_S and not self.reader.at_eof() and not self.writer.is_closing()

    async def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.reader.read(READ_BYTES)
            self.h11.receive_data(data)  # b"": the server closed; h11 says whether that was the message's end

    def close(self) -> None:
        self.writer.close()


class H11Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams: a call takes an idle connection to its origin or opens one, and gives it back
    kept alive once its answer was read whole; a call cut short (cancelled, a broken answer) closes its connection.
    At most `keep` idle connections are kept per origin. Transport failures are httpx's errors (ConnectError,
    ReadError, WriteError, RemoteProtocolError), as httpx's own transport raises them."""

    def __init__(self, tls: ssl.SSLContext, *, keep: int) -> None:
        self._tls = tls
        self._keep = keep
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        connection = self._take_idle(origin) or await self._open(origin, request)
        try:
            await self._send(connection, request)
            head = await self._receive_head(connection)
        except BaseException:
            connection.close()
            raise
        return httpx.Response(
            head.status_code,
            headers=list(head.headers),
            stream=_Body(self, origin, connection),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )

    def _take_idle(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    def give_back(self, origin: tuple[str, str, int], connection: _Connection) -> None:
        state = connection.h11
        if state.our_state is h11.DONE and state.their_state is h11.DONE:
            state.start_next_cycle()
            idle = self._idle.setdefault(origin, [])
            if len(idle) < self._keep:
                connection.idle_since = time.monotonic()
                idle.append(connection)
                return
        connection.close()

    async def _open(self, origin: tuple[str, str, int], request: httpx.Request) -> _Connection:
        scheme, host, port = origin
        timeouts = request.extensions.get("timeout", {})
        tls = self._tls if scheme == "https" else None
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, limit=READ_BYTES)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in time", request=request) from None
        except OSError as error:
            raise httpx.ConnectError(f"{host}:{port}: {error}", request=request) from None
        return _Connection(reader, writer)

    async def _send(self, connection: _Connection, request: httpx.Request) -> None:
        body = await request.aread()
        state = connection.h11
        try:
            head = state.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
            )
            data = (head or b"") + ((state.send(h11.Data(data=body)) or b"") if body else b"")
            connection.writer.write(data + (state.send(h11.EndOfMessage()) or b""))
            await connection.writer.drain()
        except h11.LocalProtocolError as error:
            raise httpx.LocalProtocolError(str(error), request=request) from None
        except OSError as error:
            raise httpx.WriteError(str(error), request=request) from None

    async def _receive_head(self, connection: _Connection) -> h11.Response:
        while True:
            event = await _received(connection)
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.InformationalResponse):
                continue  # a 1xx before the answer
            raise httpx.RemoteProtocolError(f"the server closed the connection before its answer ({event!r})")

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


async def _received(connection: _Connection) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
    try:
        return await connection.next_event()
    except h11.RemoteProtocolError as error:
        raise httpx.RemoteProtocolError(str(error)) from None
    except OSError as error:
        raise httpx.ReadError(str(error)) from None


class _Body(httpx.AsyncByteStream):
    """An answer's body, read from its connection as the caller iterates; the connection goes back to the idle ones
    once the body was read whole and closed, and is closed otherwise."""

    def __init__(self, transport: H11Transport, origin: tuple[str, str, int], connection: _Connection) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._whole = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while True:
            event = await _received(connection)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._whole = True
                return
            else:
                raise httpx.RemoteProtocolError(f"the server closed the connection inside its answer ({event!r})")

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._whole:
            self._transport.give_back(self._origin, connection)
        else:
            connection.close()
