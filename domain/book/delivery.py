"""Reading and delivery (R27, R28): a turn reads unreported outcomes; what it read is delivered only once it
answered."""

from __future__ import annotations

from datetime import datetime

from domain.book import outbox, retention, waits
from domain.book.state import (
    Entry,
    Judgement,
    OwnerBook,
    Refusal,
    RefusalCode,
    forget_reads,
    other_owner,
    unknown_helper,
)
from domain.limits import delivered_problem
from domain.rows import RowState
from domain.texts import text


def judge_read(
    book: OwnerBook, owner: str | None, helper_ids: list[str], *, allow_finishing: bool = False
) -> Judgement[None]:
    """The whole judgement of a read, as the coordinator's validator and its handler both make it: the owner (when
    the request names one), then `decide_read`."""
    return other_owner(book, owner or book.owner, book.language) or decide_read(
        book, helper_ids, allow_finishing=allow_finishing
    )


def judge_delivered(book: OwnerBook, owner: str | None, answer_chars: int) -> Judgement[None]:
    """The judgement of a delivery: the owner (when the request names one) and the answer's length; what was read
    is the book's to know."""
    problem = delivered_problem(answer_chars)
    if problem is not None:
        return Refusal(code=RefusalCode.INVALID_REQUEST, message=problem)
    return other_owner(book, owner or book.owner, book.language)


def decide_read(book: OwnerBook, helper_ids: list[str], *, allow_finishing: bool = False) -> Judgement[None]:
    """Refuse unknown helpers and outcomes that are not unreported. With `allow_finishing`, a helper whose
    finished notice has not arrived yet passes: the store may already show its outcome to the chat."""
    for helper_id in helper_ids:
        entry = book.entries.get(helper_id)
        if entry is None:
            return unknown_helper(helper_id, book.language)
        if allow_finishing and entry.helper_writes and entry.state is RowState.RUNNING:
            continue
        if entry.state is not RowState.UNREPORTED:
            return Refusal(
                code=RefusalCode.NOT_UNREPORTED,
                message=text("refused.not_unreported", entry.language, helper_id=helper_id),
            )
    return None


def finishing(book: OwnerBook, helper_ids: list[str]) -> bool:
    """Some of these helpers still own their rows: their outcomes are being finalized."""
    return any((entry := book.entries.get(h)) is not None and entry.helper_writes for h in helper_ids)


def read(book: OwnerBook, turn: str, helper_ids: list[str]) -> list[str]:
    reads = book.turn_reads.setdefault(turn, [])
    for helper_id in helper_ids:
        if helper_id not in reads:
            reads.append(helper_id)
    return list(reads)


def deliver(book: OwnerBook, turn: str, now: datetime) -> list[Entry]:
    """Mark what `turn` read as delivered; only after that turn answered (the caller's promise, R28)."""
    delivered: list[Entry] = []
    for helper_id in book.turn_reads.pop(turn, []):
        entry = book.entries.get(helper_id)
        if entry is not None and deliver_one(book, entry, now):
            entry.generation += 1
            delivered.append(entry)
    forget_reads(book, [entry.helper_id for entry in delivered])
    return delivered


def deliver_one(book: OwnerBook, entry: Entry, now: datetime) -> bool:
    """The owner has this outcome now (a turn that read it answered, or the owner answered it): an unreported one is
    delivered, kept from now (R29) and no longer announced, as the chat has it (R26); a question or authorization
    not answered yet waits from now (R54). True if it was unreported; its
    row must then be written, at a new generation the caller sets."""
    if entry.state is not RowState.UNREPORTED:
        return False
    entry.state = RowState.DELIVERED
    entry.delivered_at = now
    retention.keep_from(book, entry, now)  # from its delivery
    waits.begin(book, entry, now)
    outbox.withdraw_settled(book)
    return True
