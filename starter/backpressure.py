"""How many writes one starter process has in flight, and the refusal of those it cannot answer in time (R48).

The writes of a process are sent to Temporal a limited number at a time; the next ones wait their turn, in the
order they came, for as long as their bound allows (`ReplyBy.left_to_wait`); one that cannot expect its turn
within that is refused at once with `Busy`, before anything is sent, and one whose wait runs out is refused the
same way.

The number in flight follows the runtime, as TCP's window follows a network (additive increase, multiplicative
decrease): while the gate is full and Temporal answers a write within `answer_within_s` (the time a sent write has
to be accepted in its bound), the limit grows by one every `limit` answers, so a runtime with room is given more;
an answer slower than that takes a tenth off it, at most once per `limit` answers, so a runtime falling behind is
given fewer and the writes wait here, where they can still be refused cleanly, rather than inside Temporal, where
they would run out of their bound. `ceiling` (HELPER_STARTER_MAX_IN_FLIGHT) bounds it. The pace is the answers a
second while the gate is full, over the last few seconds it was.

A refusal says when to ask again: a little before what this process holds, and every caller refused before it, is
worked off at the pace, so that returning callers find their turn within what they may wait and the gate never
idles while they are away.

A write past the gate is never dropped: what Temporal accepted is carried out (the worker sheds nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from protocol.deadlines import MOST_WAITING, ReplyBy
from protocol.errors import NOT_TAKEN, Busy

# The pace is measured over the answers of the last this many seconds the gate was full (time not full does not
# count, so a pause does not dilute it), once there are this many.
PACE_WINDOW_S = 5.0
PACE_MIN_ANSWERS = 5
# The limit before there is a pace, and the least it falls to: a runtime answering slowly still gets this many.
LIMIT_START = 32
LIMIT_LEAST = 4
# An answer slower than `answer_within_s` takes this share off the limit.
BACK_OFF = 0.9
# How much each answer moves the running mean of a write's time in flight (the pace before answers while full).
IN_FLIGHT_WEIGHT = 0.2
# Retry-After stays within these (whole seconds: HTTP's unit).
RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 120

# Told, for each write that went through, how long it waited for its place and how long it was then in flight.
WriteObserver = Callable[[float, float], None]


class WriteGate:
    """The writes of one process: `limit` in flight at most (moving with the runtime's pace, up to `ceiling`), the
    rest waiting in order."""

    def __init__(
        self,
        ceiling: int,
        answer_within_s: float = 2.0,
        observe: WriteObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling = ceiling
        self.answer_within_s = answer_within_s
        self.observe = observe
        # The clock `ReplyBy.monotonic` is read on, and the running loop's, which times a wait for a place.
        self._clock = clock
        self._limit = float(min(ceiling, LIMIT_START))
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._in_flight_s: float | None = None  # the running mean of a write's time in flight
        self._full_answers: deque[float] = deque()  # the full clock when writes were answered while full
        self._full_clock = 0.0  # seconds the gate has been full, up to `_full_since`
        self._full_since: float | None = None  # when the gate became full, while it is
        self._answers_since_back_off = ceiling  # the first slow answer backs off at once
        self._promised = 0.0  # when the last caller refused was told to come back (on the clock)

    @property
    def limit(self) -> int:
        return max(1, round(self._limit))

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def full(self) -> bool:
        return self.in_flight >= self.limit or bool(self._waiting)

    def pace(self) -> float | None:
        """Writes this gate answers per second when full, or None before any was answered."""
        answers = self._recent_full_answers()
        full_s = min(PACE_WINDOW_S, self._full_clock_now())
        if len(answers) >= PACE_MIN_ANSWERS and full_s > 0:
            return len(answers) / full_s
        if self._in_flight_s is not None:
            return self.limit / max(self._in_flight_s, 0.001)
        return None

    def expected_wait_s(self, ahead: int) -> float:
        """How long a write with `ahead` writes waiting before it can expect to wait; 0 before there is a pace."""
        pace = self.pace()
        return 0.0 if pace is None else (ahead + 1) / pace

    def promise_retry_s(self, by: ReplyBy, ahead: int | None = None) -> int:
        """When a caller refused now should ask again: once the writes that were ahead of it (all this process
        holds, unless told) and every caller refused before it are worked off at the pace (one write a second for
        each place before there is a measure), less half of what it may wait for its turn, so it arrives while the
        writes ahead of it still run. The moment is kept, so the next refusal is told one answer's time later."""
        now = self._clock()
        pace = self.pace() or float(self.limit)
        ahead = self.in_flight + self.waiting if ahead is None else ahead
        early = by.seconds * MOST_WAITING / 2
        at = max(now + max(0.0, ahead / pace - early), self._promised)
        self._promised = at + 1 / pace
        return min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, round(at - now)))

    def _refusal(self, why: str, by: ReplyBy, ahead: int | None = None) -> Busy:
        after = self.promise_retry_s(by, ahead)
        return Busy(
            f"{NOT_TAKEN}: {why} ({self.in_flight} writes in flight, {self.waiting} waiting); ask again in {after} s",
            after,
        )

    @contextlib.asynccontextmanager
    async def turn(self, by: ReplyBy) -> AsyncIterator[None]:
        """Hold one of the `limit` places while the write runs; Busy if none comes in time."""
        came = self._clock()
        if not self.full:
            self.in_flight += 1
            self._note_fullness()
        else:
            await self._wait(by)
        sent = self._clock()
        try:
            yield
        finally:
            self._answered(sent)
            self.in_flight -= 1
            self._hand_on()
            self._note_fullness()
            if self.observe is not None:
                self.observe(sent - came, self._clock() - sent)

    def _answered(self, sent: float) -> None:
        now = self._clock()
        in_flight_s = now - sent
        self._in_flight_s = _moved(self._in_flight_s, in_flight_s, IN_FLIGHT_WEIGHT)
        self._answers_since_back_off += 1
        if in_flight_s > self.answer_within_s:
            if self._answers_since_back_off >= self.limit:
                self._limit = max(float(LIMIT_LEAST), self._limit * BACK_OFF)
                self._answers_since_back_off = 0
        elif self.full:
            self._limit = min(float(self.ceiling), self._limit + 1 / self._limit)
        if self.full:
            self._full_answers.append(self._full_clock_now())

    def _recent_full_answers(self) -> deque[float]:
        since = self._full_clock_now() - PACE_WINDOW_S
        while self._full_answers and self._full_answers[0] < since:
            self._full_answers.popleft()
        return self._full_answers

    def _full_clock_now(self) -> float:
        """Seconds the gate has been full in all, up to now."""
        if self._full_since is None:
            return self._full_clock
        return self._full_clock + self._clock() - self._full_since

    def _note_fullness(self) -> None:
        """Start or stop the full clock: called after every change of what is in flight or waiting."""
        if self.full and self._full_since is None:
            self._full_since = self._clock()
        elif not self.full and self._full_since is not None:
            self._full_clock = self._full_clock_now()
            self._full_since = None

    def refusal_now(self, by: ReplyBy) -> Busy | None:
        """The refusal of a write that cannot expect its turn within its bound, before anything of it is read or
        sent; None when it may wait (or go at once)."""
        if not self.full:
            return None
        if self.expected_wait_s(self.waiting) > by.left_to_wait(self._clock()):
            return self._refusal("this process cannot send it in time", by)
        return None

    async def _wait(self, by: ReplyBy) -> None:
        allowed = by.left_to_wait(self._clock())
        if (refused := self.refusal_now(by)) is not None:
            raise refused
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ahead: int | None = None
        self._waiting.append(place)
        self._note_fullness()
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
                    ahead = self.in_flight + self._waiting.index(place)  # those behind it are refused in turn
                    self._waiting.remove(place)
            self._note_fullness()
            if isinstance(error, TimeoutError):
                raise self._refusal("its turn did not come in time", by, ahead) from None
            raise

    def _hand_on(self) -> None:
        while self._waiting and self.in_flight < self.limit:
            place = self._waiting.popleft()
            if not place.done():
                self.in_flight += 1
                place.set_result(None)


def _moved(mean: float | None, value: float, weight: float) -> float:
    return value if mean is None else mean + weight * (value - mean)
