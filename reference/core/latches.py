"""Named latches that hold scripted turns until a test or the demo releases them.

A latch is closed until released and stays open afterwards, so a turn that reaches it late passes at
once. A scripted task names a latch with `hold_until` (wait before a given call) or `cancel_hold_until`
(a cancel is confirmed only once it opens); `POST /v1/demo/latches/{name}/release` opens it. This makes
"these helpers are still running" true by construction instead of by timing. Every wait is bounded
(`hold_timeout_ms`), so a forgotten latch never holds a session forever.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

LATCH_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
LATCH_NAME_RULE = "1-64 letters, digits, '.', '_' or '-'"
DEFAULT_HOLD_TIMEOUT_MS = 600_000  # generous for a demo, short enough that nothing hangs a session for good

WaitEnd = Literal["released", "finish", "timeout"]


class LatchState(BaseModel):
    name: str
    released: bool = Field(description="Once released, a latch stays open: later arrivals pass at once.")
    waiting: int = Field(description="Turns waiting on the latch right now.")


@dataclass(frozen=True)
class LatchHolds:
    """Where a scripted turn waits on latches; the default waits nowhere."""

    until: str | None = None  # latch to wait on before call `at_step`
    at_step: int = 1
    cancel_until: str | None = None  # a cancel is confirmed only once this latch is released
    timeout_ms: int = DEFAULT_HOLD_TIMEOUT_MS


class Latches:
    """The latches of one core process (one event loop); names are created on first use."""

    def __init__(self) -> None:
        self._opened: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}

    def _event(self, name: str) -> asyncio.Event:
        return self._opened.setdefault(name, asyncio.Event())

    def release(self, name: str) -> LatchState:
        state = self.state(name)  # the turns that were waiting when it opened
        self._event(name).set()
        return LatchState(name=name, released=True, waiting=state.waiting)

    def state(self, name: str) -> LatchState:
        return LatchState(name=name, released=self._event(name).is_set(), waiting=self._waiting.get(name, 0))

    async def wait(self, name: str, timeout_ms: int, finish: asyncio.Event | None = None) -> WaitEnd:
        """Wait until `name` is released, `finish` is set (finish-now) or `timeout_ms` passed.

        Cancelling the caller (a cancelled session) ends the wait at once.
        """
        opened = self._event(name)
        if opened.is_set():
            return "released"
        if finish is not None and finish.is_set():
            return "finish"
        waiters = {asyncio.create_task(opened.wait())}
        if finish is not None:
            waiters.add(asyncio.create_task(finish.wait()))
        self._waiting[name] = self._waiting.get(name, 0) + 1
        try:
            await asyncio.wait(waiters, timeout=timeout_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting[name] -= 1
            for waiter in waiters:
                waiter.cancel()
        if opened.is_set():
            return "released"
        if finish is not None and finish.is_set():
            return "finish"
        logger.warning("latch %r was not released within %d ms; the held turn goes on", name, timeout_ms)
        return "timeout"
