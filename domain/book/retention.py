"""Retention (R29): delivered and closed rows expire `HELPER_KEEP_MS` after delivery or finish."""

from __future__ import annotations

from datetime import datetime

from domain.book.state import OwnerBook, forget_reads, note_removed
from domain.rows import RowState


def forget(book: OwnerBook, helper_ids: list[str]) -> None:
    removed = [book.entries.pop(helper_id) for helper_id in helper_ids if helper_id in book.entries]
    forget_reads(book, helper_ids)
    note_removed(book, removed)


def expired(book: OwnerBook, now: datetime) -> list[str]:
    return [
        e.helper_id
        for e in book.entries.values()
        if e.keep_until is not None
        and e.keep_until <= now
        and e.state in (RowState.DELIVERED, RowState.CLOSED)
        and not e.helper_writes
        and not e.holds_slot
    ]


def next_wakeup(book: OwnerBook) -> datetime | None:
    """The earliest retention expiry or lease end: the coordinator keeps one timer for it."""
    moments = [e.keep_until for e in book.entries.values() if e.keep_until and not e.helper_writes]
    moments += [e.lease_until for e in book.entries.values() if e.lease_until]
    return min(moments) if moments else None


def timer_outdated(wanted: datetime | None, armed: datetime | None) -> bool:
    """Whether the coordinator's one timer must be armed again for the book as it is now. Only an earlier
    moment needs it: a timer that fires before anything is due costs one idle task, while cancelling and
    starting a timer each time a lease ends (every helper) costs two timer events and a server timer."""
    return wanted is not None and (armed is None or wanted < armed)
