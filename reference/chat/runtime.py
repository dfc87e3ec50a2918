"""The reference chat's nudge to the runtime: `POST {runtime}/v1/owners/{owner}/idle` when an owner's chat is idle.

The runtime offers an event only to an idle chat and, while the chat is busy or down, backs off for up to
minutes; the nudge lets it offer a waiting event within seconds. It is best effort with a stated bound: each
call takes at most `TELL_TIMEOUT_S`, and a failure (refused, no answer in time, not 2xx) is a WARNING naming
the owner and the cause, never an error of the control that caused it. Without a runtime URL nobody is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from types import TracebackType
from urllib.parse import quote

import httpx

logger = logging.getLogger(__name__)

TELL_TIMEOUT_S = 2.0
# Owners told at once when the chat answers again: enough to tell hundreds within the bound of a few calls,
# few enough not to flood a runtime that just saw the chat come back.
TELL_CONCURRENCY = 10


class Runtime:
    """The runtime's starter API as the chat sees it; one HTTP client, open between `async with` and its exit."""

    def __init__(self, url: str | None, token: str | None = None) -> None:
        self.url = url
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.AsyncClient | None = None
        self._limit = asyncio.Semaphore(TELL_CONCURRENCY)
        self._background: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Runtime:
        if self.url is not None:
            # trust_env=False: the runtime is named by its URL alone; a proxy variable in the shell must not
            # reroute a loopback call.
            self._client = httpx.AsyncClient(
                base_url=self.url.rstrip("/"), headers=self._headers, timeout=TELL_TIMEOUT_S, trust_env=False
            )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def tell_idle(self, owner: str) -> bool:
        """Tell the runtime that `owner`'s chat is idle; whether it answered 2xx. Never raises."""
        if self._client is None:
            return False
        path = f"/v1/owners/{quote(owner, safe='')}/idle"
        try:
            # httpx's timeout bounds each phase; this bounds the whole call (connect, write and read together).
            async with asyncio.timeout(TELL_TIMEOUT_S):
                answer = await self._client.post(path)
        except TimeoutError:
            cause = f"no answer within {TELL_TIMEOUT_S:g} s"
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        else:
            if answer.is_success:
                logger.info("told the runtime that %s is idle (%s)", owner, answer.text[:200])
                return True
            cause = f"it answered {answer.status_code} {answer.text[:200]}"
        logger.warning("could not tell the runtime at %s that %s is idle: %s", self.url, owner, cause)
        return False

    async def tell_all_idle(self, owners: Iterable[str]) -> None:
        """Tell the runtime about each owner, `TELL_CONCURRENCY` at a time. Waits at most `TELL_TIMEOUT_S`: what
        is not told by then goes on in the background (each call keeps its own bound), so the caller answers."""
        owners = list(owners)
        if self._client is None or not owners:
            return
        task = asyncio.create_task(self._tell_each(owners), name="tell-runtime-idle")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        # wait() leaves the task running on a timeout, where wait_for would cancel it.
        await asyncio.wait({task}, timeout=TELL_TIMEOUT_S)

    async def _tell_each(self, owners: list[str]) -> None:
        await asyncio.gather(*(self._tell_in_turn(owner) for owner in owners))

    async def _tell_in_turn(self, owner: str) -> None:
        # The bound starts once a turn is free: an owner waiting behind slow calls is not counted as failed.
        async with self._limit:
            await self.tell_idle(owner)
