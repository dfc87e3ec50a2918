"""Follow-ups: a new helper that continues an earlier one's question, authorization wait or
partial outcome, with the owner's answer as its task.

The rules: only the owner's own helper (the book is one owner's), only an outcome that waits for the owner,
only one follow-up per outcome (asking again answers with the existing one, like a repeated admission). When
the follow-up is admitted, the earlier row is delivered (the answer is the owner's reply to it) and both rows
name each other; the earlier row is not evicted while its follow-up has yet to pick up the context.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from domain.book import delivery
from domain.book.state import Entry, OwnerBook, Refusal, RefusalCode, refusal, unknown_helper
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState

FOLLOWABLE_KINDS: Final = frozenset({OutcomeKind.QUESTION, OutcomeKind.AUTHORIZATION, OutcomeKind.PARTIAL})


def decide_follow_up(book: OwnerBook, request: HelperRequest) -> Entry | Refusal | None:
    """None when `request` may follow its earlier helper up; the existing follow-up; or the refusal."""
    earlier_id = request.follow_up
    if earlier_id is None:
        return None
    language = request.language
    earlier = book.entries.get(earlier_id)
    if earlier is None:  # another owner's helper is not in this book either
        return unknown_helper(earlier_id, language)
    if earlier.followed_up_by is not None:
        existing = book.entries.get(earlier.followed_up_by)
        if existing is not None:
            return existing
        return refusal(
            RefusalCode.NOT_FOLLOWABLE,
            "refused.follow_up_gone",
            language,
            earlier=earlier_id,
            follow_up=earlier.followed_up_by,
        )
    if earlier.state.is_open:
        return refusal(RefusalCode.NOT_FOLLOWABLE, "refused.follow_up_still_open", language, earlier=earlier_id)
    if earlier.state is RowState.CLOSED or earlier.close_requested:
        return refusal(RefusalCode.NOT_FOLLOWABLE, "refused.follow_up_closed", language, earlier=earlier_id)
    if earlier.outcome_kind not in FOLLOWABLE_KINDS:
        return refusal(RefusalCode.NOT_FOLLOWABLE, "refused.follow_up_kind", language, earlier=earlier_id)
    return None


def link_follow_up(book: OwnerBook, entry: Entry, now: datetime) -> Entry | None:
    """Link a just-admitted follow-up and its earlier helper, and deliver the earlier outcome; returns the
    earlier entry (its row must be written with its new generation), or None for an ordinary helper."""
    if entry.follow_up_of is None:
        return None
    earlier = book.entries[entry.follow_up_of]
    earlier.followed_up_by = entry.helper_id
    delivery.deliver_one(book, earlier, now)  # the follow-up carries it
    earlier.generation += 1
    return earlier


def keeps_context_for(book: OwnerBook, entry: Entry) -> bool:
    """An earlier helper whose follow-up has not finished yet: its row and texts are still needed."""
    if entry.followed_up_by is None:
        return False
    follow_up = book.entries.get(entry.followed_up_by)
    return follow_up is not None and follow_up.state.is_open
