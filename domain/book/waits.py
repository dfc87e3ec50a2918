"""Every wait for the owner ends (R54). A question or an authorization wait starts when its outcome is delivered: it
is reminded at its policy's offsets and ends `expired` at its bound, unless an answer, a close or a follow-up ends
it first. The reminders and the expiry reach the chat as system events through the outbox; the coordinator's one
timer wakes for the next of them (`next_moment`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from domain.book import outbox, retention
from domain.book.state import Entry, EventKind, OwnerBook, wait_under_way
from domain.limits import WaitPolicy
from domain.messages.activities import WaitSchedule
from domain.rows import RowState


def policy_of(book: OwnerBook, entry: Entry) -> WaitPolicy:
    return entry.wait or book.policy.wait


def begin(book: OwnerBook, entry: Entry, now: datetime) -> None:
    """The outcome was delivered: a question or authorization still unanswered waits from now, until its bound."""
    if entry.asked is None or entry.answer is not None or entry.wait_ends_at is not None:
        return
    after = policy_of(book, entry).expires_after_ms(book.policy.keep_ms)
    entry.wait_ends_at = now + timedelta(milliseconds=after)


def schedule(book: OwnerBook, entry: Entry) -> WaitSchedule | None:
    """The wait that began at delivery, as the row keeps it: its bound and the reminders before it."""
    if entry.wait_ends_at is None or entry.delivered_at is None:
        return None
    reminders = policy_of(book, entry).reminders_ms(book.policy.keep_ms)
    return WaitSchedule(ends_at=entry.wait_ends_at, reminders_ms=list(reminders))


def past_bound(entry: Entry, now: datetime) -> bool:
    """The wait reached its bound and has ended, also in the moment before the coordinator's timer writes so: an
    answer or a close from now on finds it expired."""
    return wait_under_way(entry) and entry.wait_ends_at is not None and entry.wait_ends_at <= now


def next_reminder_at(book: OwnerBook, entry: Entry) -> datetime | None:
    offsets = policy_of(book, entry).reminders_ms(book.policy.keep_ms)
    if entry.delivered_at is None or entry.reminders_sent >= len(offsets):
        return None
    return entry.delivered_at + timedelta(milliseconds=offsets[entry.reminders_sent])


def next_moment(book: OwnerBook) -> datetime | None:
    """The earliest reminder or expiry still to come: the coordinator's one timer wakes for it too."""
    moments = []
    for entry in book.entries.values():
        if wait_under_way(entry):
            assert entry.wait_ends_at is not None
            reminder = next_reminder_at(book, entry)
            moments.append(min(reminder, entry.wait_ends_at) if reminder is not None else entry.wait_ends_at)
    return min(moments) if moments else None


@dataclass
class Due:
    """What came due: the waits reminded now, and those that ended `expired` (their rows to write)."""

    reminded: list[Entry] = field(default_factory=list)
    expired: list[Entry] = field(default_factory=list)


def come_due(book: OwnerBook, now: datetime) -> Due:
    """Remind and expire what is due by `now`. Reminders that all fell due while nobody looked (a long outage)
    are one reminder, the latest; a wait past its bound gets no reminder, only its expiry."""
    due = Due()
    for entry in sorted(book.entries.values(), key=lambda e: e.seq):
        if not wait_under_way(entry):
            continue
        assert entry.wait_ends_at is not None and entry.delivered_at is not None
        if entry.wait_ends_at <= now:
            expire(book, entry, now)
            due.expired.append(entry)
            continue
        offsets = policy_of(book, entry).reminders_ms(book.policy.keep_ms)
        passed = sum(1 for ms in offsets if entry.delivered_at + timedelta(milliseconds=ms) <= now)
        if passed > entry.reminders_sent:
            entry.reminders_sent = passed
            outbox.queue_notice(book, EventKind.REMINDER, entry)
            due.reminded.append(entry)
    return due


def expire(book: OwnerBook, entry: Entry, now: datetime) -> None:
    """The wait ended unanswered at its bound: the row says `expired` (at the bound, also when the timer came late),
    is kept as retention says from now, the chat is told once, and a reminder not yet offered is withdrawn. An
    answer arriving at or after the bound is refused `expired`, whether or not this ran yet."""
    entry.state = RowState.EXPIRED
    entry.expired_at = entry.wait_ends_at or now  # the bound, which an answer arriving after it was told
    entry.generation += 1
    retention.keep_from(book, entry, now)
    outbox.withdraw_settled(book)
    outbox.queue_notice(book, EventKind.EXPIRED, entry)
