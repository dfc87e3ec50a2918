"""The bound on every starter write, and the rule that keeps its answer true (R48).

A caller is answered by a moment it can rely on (`ReplyBy`, HELPER_STARTER_TIMEOUT_MS after it asked). A write
that Temporal has not accepted by then must never be taken later, or "not taken" would be a lie: so each update
carries, in its id, an *accept-by* time `ACCEPT_GRACE` before the answer is due, and the coordinator's validators
refuse an update that reaches them after it (`too_late`). The grace covers the workflow task that accepts the
update reaching the server, and clocks that differ by a little between the starter's machine and the server's.

The time travels in the update id, not in the message, so a coordinator of an earlier build (which ignores it)
still reads every message, and a raw client's update, which has no such id, is never refused for its age.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from config.settings import Settings

# Between a request's accept-by time and the moment its caller is answered: this, or a third of a shorter bound.
ACCEPT_GRACE = timedelta(seconds=3)
# The share of its bound a write may spend waiting for its turn in this process before it is sent.
MOST_WAITING = 0.5

_MARK = "by-"


def accept_within_s(bound_s: float) -> float:
    """The time a sent write has to be accepted by Temporal after the longest wait for its turn (`MOST_WAITING` of
    its bound) and before its accept-by time: the starter's gate keeps in flight what Temporal answers within
    this (starter.backpressure)."""
    return bound_s * (1 - MOST_WAITING) - min(ACCEPT_GRACE.total_seconds(), bound_s / 3)


@dataclass(frozen=True)
class ReplyBy:
    """When the caller of one write is answered: a monotonic moment for this process's waits and the same moment on
    the wall clock, for the accept-by time the coordinator checks."""

    monotonic: float
    wall: datetime
    seconds: float  # the whole bound
    stamped: bool = True  # False: the updates carry no accept-by time (HELPER_STARTER_ACCEPT_BY=false)

    @classmethod
    def within(cls, seconds: float, *, stamped: bool = True, whole: float | None = None) -> ReplyBy:
        """Answered `seconds` from now; `whole`: the bound it is part of, if some of it was spent already."""
        wall = datetime.now(UTC) + timedelta(seconds=seconds)
        return cls(time.monotonic() + seconds, wall, seconds if whole is None else whole, stamped)

    def left(self, now: float | None = None) -> float:
        """Seconds until the answer is due (never below 0), from `now` on the monotonic clock (the current time
        unless given)."""
        return max(0.0, self.monotonic - (time.monotonic() if now is None else now))

    def left_to_wait(self, now: float | None = None) -> float:
        """Seconds a write may still wait for its turn before it is sent (`MOST_WAITING` of the bound)."""
        return max(0.0, self.left(now) - (1 - MOST_WAITING) * self.seconds)

    @property
    def accept_by(self) -> datetime:
        return self.wall - self._grace

    def left_to_accept(self) -> float:
        """Seconds until the accept-by time (never below 0): a write not accepted by then never will be."""
        return max(0.0, self.left() - self._grace.total_seconds())

    @property
    def _grace(self) -> timedelta:
        return min(ACCEPT_GRACE, timedelta(seconds=self.seconds / 3))

    def update_id(self, kind: str, subject: str) -> str:
        """A fresh update id (so a repeated request reaches the handler, which answers with the current state),
        carrying the accept-by time in milliseconds since the epoch."""
        stamp = f"{_MARK}{int(self.accept_by.timestamp() * 1000)}/" if self.stamped else ""
        return f"{kind}/{subject}/{stamp}{uuid.uuid4().hex}"


def reply_by(settings: Settings, since: float | None = None) -> ReplyBy:
    """When a write asked now, or at `since` (a monotonic moment: when its request arrived), is answered:
    HELPER_STARTER_TIMEOUT_MS after."""
    seconds = settings.starter_timeout_ms / 1000
    spent = 0.0 if since is None else max(0.0, time.monotonic() - since)
    return ReplyBy.within(seconds - spent, stamped=settings.starter_accept_by, whole=seconds)


def accept_by_of(update_id: str) -> datetime | None:
    """The accept-by time an update id carries (its second part from the end), or None: a raw client's id, or one
    without a stamp."""
    parts = update_id.rsplit("/", 2)
    if len(parts) < 3 or not parts[1].startswith(_MARK) or not parts[1][len(_MARK) :].isdigit():
        return None
    milliseconds = int(parts[1][len(_MARK) :])
    if milliseconds >= 10**14:  # beyond what a datetime holds
        return None
    return datetime.fromtimestamp(milliseconds / 1000, UTC)


def too_late(update_id: str, now: datetime) -> bool:
    """Whether an update reaching its workflow at `now` arrived after its accept-by time: its caller has been, or
    is about to be, told that nothing was taken."""
    accept_by = accept_by_of(update_id)
    return accept_by is not None and now > accept_by
