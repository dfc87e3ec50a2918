"""Slots (R6-R8): lend free slots in admission order, as leases; take them back at a helper's end."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.book import retention
from domain.book.state import EARLY_NOTICES_KEPT, LEASE_MARGIN, Entry, OwnerBook
from domain.messages.signals import FinishedNotice
from domain.outcome import OutcomeKind
from domain.rows import RowState


def grant(book: OwnerBook, now: datetime) -> list[str]:
    """Pass free slots to waiting helpers in admission order; returns the helpers granted."""
    granted: list[str] = []
    while book.queue and len(book.slot_holders()) < book.policy.max_running:
        helper_id = book.queue.pop(0)
        entry = book.entries[helper_id]
        entry.holds_slot = True
        entry.state = RowState.RUNNING
        entry.lease_until = now + timedelta(milliseconds=entry.hard_ceiling_ms) + LEASE_MARGIN
        granted.append(helper_id)
    return granted


def release(book: OwnerBook, helper_id: str) -> bool:
    entry = book.entries.get(helper_id)
    if entry is None or not entry.holds_slot:
        return False
    entry.holds_slot = False
    entry.lease_until = None
    entry.finding_lost_session = False
    return True


def forget_gone_helper(book: OwnerBook, helper_id: str, now: datetime) -> Entry | None:
    """A helper workflow that no longer exists (removed by an operator) gives its slot and place back; its
    row is closed by the coordinator, at the next generation."""
    entry = book.entries.get(helper_id)
    if entry is None:
        return None
    release(book, helper_id)
    entry.helper_writes = False
    entry.generation += 1
    entry.state = RowState.CLOSED
    entry.finished_at = entry.finished_at or now
    retention.keep_from(book, entry, now)  # from when the book learns it is gone
    if helper_id in book.queue:
        book.queue.remove(helper_id)
    return entry


def expired_leases(book: OwnerBook, now: datetime) -> list[str]:
    return [e.helper_id for e in book.entries.values() if e.holds_slot and e.lease_until and e.lease_until <= now]


def expire_leases(book: OwnerBook, now: datetime) -> list[str]:
    """Take back the slots whose lease ended without the helper's notice; returns their helper ids."""
    expired = expired_leases(book, now)
    for helper_id in expired:
        release(book, helper_id)
    return expired


def finished(book: OwnerBook, notice: FinishedNotice) -> Entry | None:
    """A helper's outcome is final: its row passes back to the coordinator and it is no longer open; its slot
    passes on, unless the notice says the helper keeps it to find a lost session (R38), until a second notice.
    Returns the entry when the slot or the row changed hands (then grant slots), None for a repeat."""
    entry = book.entries.get(notice.helper_id)
    if entry is None:
        _keep_early_notice(book, notice)
        return None
    if notice.seq is not None and notice.seq != entry.seq:
        return None  # an older admission's run
    if not entry.helper_writes:
        if entry.finding_lost_session and not notice.slot_held:
            release(book, entry.helper_id)  # the lost session is found and stopped, or never existed
            return entry
        return None  # a repeated notice: the first one already handed the row over
    entry.helper_writes = False
    if notice.slot_held and entry.holds_slot:
        entry.finding_lost_session = True
    else:
        release(book, entry.helper_id)
    entry.generation = max(entry.generation, notice.generation)
    entry.outcome_kind = notice.kind
    entry.finished_at = notice.finished_at
    entry.asked = notice.asked
    if notice.helper_id in book.queue:
        book.queue.remove(notice.helper_id)
    if notice.kind is OutcomeKind.CLOSED:
        entry.state = RowState.CLOSED
        retention.keep_closed(book, entry)
    else:
        entry.state = RowState.UNREPORTED
    return entry


def _keep_early_notice(book: OwnerBook, notice: FinishedNotice) -> None:
    """A notice for a helper this book does not know yet: a worker died after starting the helper but
    before the admission was recorded, and the helper finished before the admission was replayed. Keep the
    notice for that admission (`take_early_notice`), the latest one per helper; a notice without a seq cannot
    name its admission and is dropped."""
    if notice.seq is None:
        return
    book.early_notices = [n for n in book.early_notices if n.helper_id != notice.helper_id]
    book.early_notices.append(notice)
    del book.early_notices[:-EARLY_NOTICES_KEPT]


def take_early_notice(book: OwnerBook, helper_id: str, seq: int) -> FinishedNotice | None:
    """The notice that arrived before this admission was replayed, if any."""
    for notice in book.early_notices:
        if notice.helper_id == helper_id:
            book.early_notices.remove(notice)
            return notice if notice.seq == seq else None
    return None


def closed_by_helper(book: OwnerBook, helper_id: str) -> Entry | None:
    """A running helper closed its row; it keeps its slot until the core confirms the stop (R7, R21)."""
    entry = book.entries.get(helper_id)
    if entry is None or not entry.helper_writes:
        return None
    entry.state = RowState.CLOSED
    return entry
