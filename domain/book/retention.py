"""Retention (R29): when a row goes, and which rows may go. A closed row is kept `HELPER_KEEP_MS` from its finish, a
delivered row from its delivery, an expired one from its expiry; every change that closes, delivers or expires a
row sets its time here, and the coordinator's timer removes it. Only a `removable` row goes, at its time or, without
a Goal, earlier for room (R3)."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.book.state import Entry, OwnerBook, forget_reads, note_removed
from domain.rows import RowState


def kept_until(moment: datetime, keep_ms: int) -> datetime:
    """When a row kept from `moment` goes. The helper keeps a row it closes itself by this too, from its finish."""
    return moment + timedelta(milliseconds=keep_ms)


def keep_closed(book: OwnerBook, entry: Entry) -> None:
    """A closed row is kept from its finish; one closed before it finished, from its admission."""
    keep_from(book, entry, entry.finished_at or entry.admitted_at)


def keep_from(book: OwnerBook, entry: Entry, moment: datetime) -> None:
    """The row is kept from `moment`: a delivered row's delivery, or, for a helper whose workflow is gone, when the
    book learns it (when it finished, if ever, is not known, and an operator may want to read its row)."""
    entry.keep_until = kept_until(moment, book.policy.keep_ms)


def forget(book: OwnerBook, helper_ids: list[str]) -> None:
    removed = [book.entries.pop(helper_id) for helper_id in helper_ids if helper_id in book.entries]
    forget_reads(book, helper_ids)
    note_removed(book, removed)


REMOVABLE_STATES = (RowState.DELIVERED, RowState.CLOSED, RowState.EXPIRED)


def removable(entry: Entry) -> bool:
    """A row that may go, when its time is up or for room: delivered, closed or expired, handed back to the
    coordinator (its helper no longer writes it) and holding no slot."""
    return entry.state in REMOVABLE_STATES and not entry.helper_writes and not entry.holds_slot


def evictable(entry: Entry) -> bool:
    """A row admission may remove for room before its time (R3): a removable row without a Goal (R30)."""
    return removable(entry) and not entry.is_goal_check


def expired(book: OwnerBook, now: datetime) -> list[str]:
    """The removable rows whose time is up."""
    return [
        e.helper_id for e in book.entries.values() if e.keep_until is not None and e.keep_until <= now and removable(e)
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
