"""Retention (R29): when a row goes, and which rows may go. A closed row is kept `HELPER_KEEP_MS` from its finish, a
delivered row from its delivery; every change that closes or delivers a row sets its time here, and the coordinator's
timer removes it. Only a `removable` row goes, at its time or, without a Goal, earlier for room (R3)."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.book.state import Entry, OwnerBook, forget_reads, note_removed
from domain.rows import RowState


def closed_kept_until(finished_at: datetime, keep_ms: int) -> datetime:
    """When a closed row goes: `keep_ms` after its finish. The helper keeps a row it closes itself by this too."""
    return _kept_from(finished_at, keep_ms)


def keep_closed(book: OwnerBook, entry: Entry) -> None:
    """A closed row is kept from its finish; one closed before it finished, from its admission."""
    entry.keep_until = closed_kept_until(entry.finished_at or entry.admitted_at, book.policy.keep_ms)


def keep_delivered(book: OwnerBook, entry: Entry, delivered_at: datetime) -> None:
    """A delivered row is kept from its delivery."""
    entry.keep_until = _kept_from(delivered_at, book.policy.keep_ms)


def keep_gone(book: OwnerBook, entry: Entry, now: datetime) -> None:
    """A helper whose workflow is gone is kept from the moment the book learns it: when it finished, if ever, is
    not known, and an operator may want to read its row."""
    entry.keep_until = _kept_from(now, book.policy.keep_ms)


def _kept_from(moment: datetime, keep_ms: int) -> datetime:
    return moment + timedelta(milliseconds=keep_ms)


def forget(book: OwnerBook, helper_ids: list[str]) -> None:
    removed = [book.entries.pop(helper_id) for helper_id in helper_ids if helper_id in book.entries]
    forget_reads(book, helper_ids)
    note_removed(book, removed)


def removable(entry: Entry) -> bool:
    """A row that may go, when its time is up or for room: delivered or closed, handed back to the coordinator (its
    helper no longer writes it) and holding no slot."""
    return entry.state in (RowState.DELIVERED, RowState.CLOSED) and not entry.helper_writes and not entry.holds_slot


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
