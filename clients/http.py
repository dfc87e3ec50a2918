"""What the worker's HTTP clients (core, chat) share: one httpx client per peer, configured here and nowhere else.

Every setting is explicit: the environment's proxy variables and ~/.netrc are not read (`trust_env=False`); a proxy
comes from the settings (HELPER_CORE_PROXY, HELPER_CHAT_PROXY). Redirects are not followed. No httpx timeout is
set but the connect bound a caller asks for: each call is bounded as a whole by its caller (`asyncio.timeout`),
body included, which per-read timeouts cannot do.
"""

from __future__ import annotations

import ssl

import httpx

# How long an idle connection is kept for the next call. Below the 5 s that common servers (uvicorn, nginx's
# upstreams) keep theirs, so a client seldom reuses one the server is closing at that moment.
KEEPALIVE_S = 4.0
# Small pools, because httpcore searches its whole pool for each request. The goal it serves: one worker holds
# thousands of long polls at a low CPU cost per call (python -m tools.bench.http_pool).
CONNECTIONS_PER_POOL = 2


def peer_client(*, connections: int, proxy: str | None, connect_s: float | None = None) -> httpx.AsyncClient:
    """The client of one peer: at most `connections` calls under way at once, none waiting for a connection.

    `connections` is the worker's slots that call this peer (each makes one call at a time). They are split into
    pools of CONNECTIONS_PER_POOL: httpcore looks through every connection of its pool, twice over, for each
    request."""
    tls = ssl.create_default_context()  # one for all pools: each costs tens of milliseconds to load
    limits = httpx.Limits(
        max_connections=CONNECTIONS_PER_POOL,
        max_keepalive_connections=CONNECTIONS_PER_POOL,
        keepalive_expiry=KEEPALIVE_S,
    )
    pools = [
        httpx.AsyncHTTPTransport(verify=tls, limits=limits, proxy=proxy, trust_env=False)
        for _ in range(-(-connections // CONNECTIONS_PER_POOL))
    ]
    return httpx.AsyncClient(
        transport=_LeastBusy(pools),
        timeout=httpx.Timeout(None, connect=connect_s),
        trust_env=False,
        follow_redirects=False,
    )


class _LeastBusy(httpx.AsyncBaseTransport):
    """Each request goes to the pool with the fewest calls under way; a call is under way until its body is closed."""

    def __init__(self, pools: list[httpx.AsyncHTTPTransport]) -> None:
        self._pools = pools
        self._busy = [0] * len(pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._busy.index(min(self._busy))
        self._busy[index] += 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            self._busy[index] -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Counted(response.stream, self._busy, index)
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Counted(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, busy: list[int], index: int) -> None:
        self._stream, self._busy, self._index = stream, busy, index
        self._open = True

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._busy[self._index] -= 1
        await self._stream.aclose()
