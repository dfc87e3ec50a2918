"""Close (R21-R23): forward to a helper that owns its row, withdraw an unreported outcome, remove a
delivered row."""

from __future__ import annotations

from enum import StrEnum

from domain.book import outbox, retention
from domain.book.state import Entry, Judgement, OwnerBook, Refusal, RefusalCode, forget_reads, unknown_helper
from domain.ids import check_id
from domain.rows import RowState


class CloseAction(StrEnum):
    FORWARD_TO_HELPER = "forward_to_helper"  # the helper still owns the row: it closes and cancels
    WRITE_CLOSED = "write_closed"  # unreported: withdraw the automatic report (R22)
    REMOVE = "remove"  # delivered without a Goal: remove row and directory at once (R23)
    NOTHING = "nothing"  # already closed: closing twice is harmless
    ALREADY_REMOVED = "already_removed"  # closed and since removed (retention, eviction): harmless too


def judge(book: OwnerBook, helper_id: str) -> Judgement[CloseAction]:
    """The whole judgement of a close, as the coordinator's validator and its handler both make it: the helper id
    as any input is checked (a raw client sends whatever it likes, R40), then `decide`."""
    try:
        check_id("helper id", helper_id)
    except ValueError as error:
        return Refusal(code=RefusalCode.INVALID_REQUEST, message=str(error))
    return decide(book, helper_id)


def decide(book: OwnerBook, helper_id: str) -> Judgement[CloseAction]:
    entry = book.entries.get(helper_id)
    if entry is None and helper_id in book.recently_removed:
        return CloseAction.ALREADY_REMOVED
    if entry is None:
        return unknown_helper(helper_id, book.language)
    if entry.helper_writes:
        return CloseAction.FORWARD_TO_HELPER
    if entry.state is RowState.UNREPORTED:
        return CloseAction.WRITE_CLOSED
    if entry.state in (RowState.DELIVERED, RowState.EXPIRED):
        # A row whose helper still holds its slot (R38) stays until the slot is free; retention removes it later.
        return CloseAction.WRITE_CLOSED if entry.is_goal_check or entry.holds_slot else CloseAction.REMOVE
    return CloseAction.NOTHING


def closed_for_removal(book: OwnerBook, helper_id: str) -> Entry:
    """A delivered row the owner closed, once its removal is done (CloseAction.REMOVE): it counts as closed, so that
    closing it again is harmless."""
    entry = book.entries[helper_id]
    entry.state = RowState.CLOSED
    return entry


def request(book: OwnerBook, helper_id: str) -> bool:
    """Note the owner's close of a helper that owns its row; True the first time (then signal the helper)."""
    entry = book.entries[helper_id]
    if entry.close_requested:
        return False
    entry.close_requested = True
    return True


def close_row(book: OwnerBook, helper_id: str) -> Entry:
    entry = book.entries[helper_id]
    entry.state = RowState.CLOSED
    entry.generation += 1
    retention.keep_closed(book, entry)
    forget_reads(book, [helper_id])
    outbox.withdraw_settled(book)  # a closed outcome is no longer announced (R22)
    return entry
