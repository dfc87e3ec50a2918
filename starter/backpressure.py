"""How many writes one starter process has in flight, and the refusal of those it cannot answer in time (R48).

At most `limit` writes of a process are sent to Temporal at once. The next ones wait their turn, in the order they
came, for as long as their bound allows (`AnswerBy.left_to_wait`); one that cannot expect its turn within that is
refused at once with `Busy`, before anything is sent, and one whose wait runs out is refused the same way. The
pace is measured while the gate is full (the time between answers; before that, the time in flight over the
places), so an idle spell does not slow it. The refusal says when to ask again: after what this process holds is
worked off at that pace, and after every caller refused before it, about one answer's time apart, so the retries
of a burst come back spread over the time the process needs for them instead of together.

A write past the gate is never dropped: what Temporal accepted is carried out (the worker sheds nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from protocol.deadlines import AnswerBy
from protocol.errors import NOT_TAKEN, Busy

# How much each answer moves the running means of the pace (exponential moving averages).
PACE_WEIGHT = 0.2
# Refused callers are told to come back a little faster than the measured pace: the gate never idles while they wait,
# and those that come early wait their turn in it.
RETRY_SPACING = 0.8
# Retry-After stays within these (whole seconds: HTTP's unit).
RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 120


# Told, for each write that went through, how long it waited for its place and how long it was then in flight.
WriteObserver = Callable[[float, float], None]


class WriteGate:
    """The writes of one process: `limit` in flight at most, the rest waiting in order."""

    def __init__(self, limit: int, observe: WriteObserver | None = None) -> None:
        self.limit = limit
        self.observe = observe
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._in_flight_s: float | None = None  # the running mean of a write's time in flight
        self._between_s: float | None = None  # the running mean of the time between answers while the gate is full
        self._last_answer: float | None = None
        self._promised = 0.0  # when the last caller refused was told to come back (monotonic)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def pace(self) -> float | None:
        """Writes this gate answers per second when all its places are busy, or None before any was answered."""
        if self._between_s is not None:
            return 1 / max(self._between_s, 0.001)
        if self._in_flight_s is not None:
            return self.limit / max(self._in_flight_s, 0.001)
        return None

    def expected_wait_s(self, ahead: int) -> float:
        """How long a write with `ahead` writes waiting before it can expect to wait; 0 before there is a pace."""
        pace = self.pace()
        return 0.0 if pace is None else (ahead + 1) / pace

    def promise_retry_s(self) -> int:
        """When a caller refused now should ask again: once what this process holds is worked off at its pace (one
        write a second for each place before there is a measure), and about one answer's time after the caller
        refused before it. The moment is kept, so the next refusal is told a later one."""
        now = time.monotonic()
        pace = self.pace() or float(self.limit)
        at = max(now + (self.in_flight + self.waiting) / pace, self._promised)
        self._promised = at + RETRY_SPACING / pace
        return min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(at - now)))

    def _refusal(self, why: str) -> Busy:
        after = self.promise_retry_s()
        return Busy(
            f"{NOT_TAKEN}: {why} ({self.in_flight} writes in flight, {self.waiting} waiting); ask again in {after} s",
            after,
        )

    @contextlib.asynccontextmanager
    async def turn(self, by: AnswerBy) -> AsyncIterator[None]:
        """Hold one of the `limit` places while the write runs; Busy if none comes in time."""
        came = time.monotonic()
        if self.in_flight < self.limit and not self._waiting:
            self.in_flight += 1
        else:
            await self._wait(by)
        sent = time.monotonic()
        try:
            yield
        finally:
            self._answered(sent)
            self.in_flight -= 1
            self._hand_on()
            if self.observe is not None:
                self.observe(sent - came, time.monotonic() - sent)

    def _answered(self, sent: float) -> None:
        now = time.monotonic()
        self._in_flight_s = _moved(self._in_flight_s, now - sent)
        full = self.in_flight >= self.limit or bool(self._waiting)
        if full and self._last_answer is not None:
            self._between_s = _moved(self._between_s, now - self._last_answer)
        self._last_answer = now if full else None

    def refusal_now(self, by: AnswerBy) -> Busy | None:
        """The refusal of a write that cannot expect its turn within its bound, before anything of it is read or
        sent; None when it may wait (or go at once)."""
        if self.in_flight < self.limit and not self._waiting:
            return None
        if self.expected_wait_s(self.waiting) > by.left_to_wait():
            return self._refusal("this process cannot send it in time")
        return None

    async def _wait(self, by: AnswerBy) -> None:
        allowed = by.left_to_wait()
        if (refused := self.refusal_now(by)) is not None:
            raise refused
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


def _moved(mean: float | None, value: float) -> float:
    return value if mean is None else mean + PACE_WEIGHT * (value - mean)
