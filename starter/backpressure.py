"""How many writes one starter process has in flight, and the refusal of those it cannot answer in time (R48).

At most `limit` writes of a process are sent to Temporal at once. The next ones wait their turn, in the order they
came, for as long as their bound allows (`AnswerBy.left_to_wait`); one that cannot expect its turn within that is
refused at once with `Busy`, before anything is sent, and one whose wait runs out is refused the same way. The
pace is the writes' recent time in flight over the places (Little's law), so an idle spell does not slow it. The
refusal says when to ask again: the time this process needs to work off what it holds at that pace, so a larger
backlog sends callers further away and their retries do not arrive together.

A write past the gate is never dropped: what Temporal accepted is carried out (the worker sheds nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator

from protocol.deadlines import AnswerBy
from protocol.errors import NOT_TAKEN, Busy

# How much each write's time in flight moves the running mean (an exponential moving average).
PACE_WEIGHT = 0.2
# Retry-After stays within these (whole seconds: HTTP's unit).
RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 120


class WriteGate:
    """The writes of one process: `limit` in flight at most, the rest waiting in order."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._in_flight_s: float | None = None  # the running mean of a write's time in flight

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def pace(self) -> float | None:
        """Writes this gate answers per second when all its places are busy, or None before any was answered."""
        if self._in_flight_s is None:
            return None
        return self.limit / max(self._in_flight_s, 0.001)

    def expected_wait_s(self, ahead: int) -> float:
        """How long a write with `ahead` writes waiting before it can expect to wait; 0 before there is a pace."""
        pace = self.pace()
        return 0.0 if pace is None else (ahead + 1) / pace

    def retry_after_s(self) -> int:
        """When a refused caller should ask again: the time to work off everything held, at the measured pace (one
        write a second for each slot before there is a measure)."""
        backlog = self.in_flight + self.waiting
        pace = self.pace() or float(self.limit)
        return min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(backlog / pace)))

    def _refusal(self, why: str) -> Busy:
        after = self.retry_after_s()
        return Busy(
            f"{NOT_TAKEN}: {why} ({self.in_flight} writes in flight, {self.waiting} waiting); ask again in {after} s",
            after,
        )

    @contextlib.asynccontextmanager
    async def turn(self, by: AnswerBy) -> AsyncIterator[None]:
        """Hold one of the `limit` places while the write runs; Busy if none comes in time."""
        if self.in_flight < self.limit and not self._waiting:
            self.in_flight += 1
        else:
            await self._wait(by)
        sent = time.monotonic()
        try:
            yield
        finally:
            self.in_flight -= 1
            took = time.monotonic() - sent
            mean = self._in_flight_s
            self._in_flight_s = took if mean is None else mean + PACE_WEIGHT * (took - mean)
            self._hand_on()

    async def _wait(self, by: AnswerBy) -> None:
        allowed = by.left_to_wait()
        if self.expected_wait_s(self.waiting) > allowed:
            raise self._refusal("this process cannot send it in time")
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(place)
        try:
            async with asyncio.timeout(allowed):
                await asyncio.shield(place)
        except BaseException as error:
            if place.done() and not place.cancelled():
                # Handed a place just as the wait ended: pass it on rather than lose it.
                self.in_flight -= 1
                self._hand_on()
            else:
                place.cancel()
                with contextlib.suppress(ValueError):
                    self._waiting.remove(place)
            if isinstance(error, TimeoutError):
                raise self._refusal("its turn did not come in time") from None
            raise

    def _hand_on(self) -> None:
        while self._waiting and self.in_flight < self.limit:
            place = self._waiting.popleft()
            if not place.done():
                self.in_flight += 1
                place.set_result(None)
