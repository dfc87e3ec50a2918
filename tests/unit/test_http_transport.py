"""The worker's HTTP/1.1 transport (clients.http.H11Transport) against a real server on loopback: kept-alive
connections are reused, a connection the server closed or that a call left half-read is never reused, and a broken
server is an httpx transport error the core client turns into "unavailable" (R10, R37, R46)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from clients.http import peer_client

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on a free port; `connections` counts the connections it accepted."""
    connections: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", connections


async def _requests(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        yield head


def answer(body: bytes, *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        async for _ in _requests(reader):
            writer.write(answer(b'{"ok": true}'))
            await writer.drain()


async def test_a_kept_alive_connection_serves_the_next_calls() -> None:
    async with serving(keep_alive) as (url, connections), peer_client(connections=4, proxy=None) as client:
        for _ in range(5):
            response = await client.get(f"{url}/v1/x?after=3&wait_ms=10")
            assert response.status_code == 200 and response.json() == {"ok": True}
        assert len(connections) == 1


async def test_calls_at_the_same_time_each_get_a_connection() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            async for _ in _requests(reader):
                await asyncio.sleep(0.1)
                writer.write(answer(b"{}"))
                await writer.drain()

    async with serving(slow) as (url, connections), peer_client(connections=8, proxy=None) as client:
        answers = await asyncio.gather(*(client.get(url) for _ in range(8)))
        assert all(response.status_code == 200 for response in answers)
        assert len(connections) == 8
        await asyncio.gather(*(client.get(url) for _ in range(8)))
        assert len(connections) == 8, "the eight idle connections were reused"


async def test_a_connection_the_server_closed_is_not_reused() -> None:
    async def one_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer(b"{}"))  # kept alive as far as the client knows, then closed
        await writer.drain()

    async with serving(one_each) as (url, connections), peer_client(connections=4, proxy=None) as client:
        for _ in range(3):
            assert (await client.get(url)).status_code == 200
            await asyncio.sleep(0.05)  # the close reaches the client while its connection is idle
        assert len(connections) == 3


async def test_a_call_cut_short_closes_its_connection() -> None:
    """A call cancelled while its answer trickles in (the caller's bound) leaves nothing half-read for the next."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            async for head in _requests(reader):
                if b"/slow" in head:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
                    await writer.drain()
                    await asyncio.sleep(10)
                writer.write(answer(b"{}"))
                await writer.drain()

    async with serving(trickle) as (url, connections), peer_client(connections=4, proxy=None) as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                async with client.stream("GET", f"{url}/slow") as response:
                    await response.aread()
        assert (await client.get(f"{url}/fast")).json() == {}
        assert len(connections) == 2


async def test_a_server_that_speaks_no_http_is_a_protocol_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"\x00\xff not http at all\r\n\r\n")
        await writer.drain()

    async with serving(garbage) as (url, _), peer_client(connections=1, proxy=None) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(url)


async def test_a_server_that_closes_before_answering_is_a_protocol_error() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")

    async with serving(hang_up) as (url, _), peer_client(connections=1, proxy=None) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(url)


async def test_nobody_listening_is_a_connect_error() -> None:
    from tests.helpers import free_port

    async with peer_client(connections=1, proxy=None) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/")


async def test_a_body_is_sent_and_a_chunked_answer_is_read() -> None:
    seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
        )
        seen.append(await reader.readexactly(length))
        writer.write(
            b'HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n'
        )
        await writer.drain()

    async with serving(echo) as (url, _), peer_client(connections=1, proxy=None) as client:
        response = await client.post(f"{url}/v1/sessions", json={"task": "x"})
        assert response.status_code == 201 and response.json() == {"a": 1}
        assert seen == [b'{"task":"x"}']
