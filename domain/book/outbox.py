"""The chat outbox (R26, R54): one system event at a time, offered while the chat is idle, with a key that makes a
repeat harmless. An event announces unannounced outcomes (`ready`), reminds the owner of a wait (`reminder`) or
says a wait expired (`expired`); outcomes come first, then the notices in the order they came due. A ready event
given up after a while leaves its outcomes unreported. An event that has nothing left to tell is withdrawn, never
offered again: a ready one none of whose outcomes is unreported any more (all read and delivered, or closed, R22),
a reminder of a wait that ended, an expiry of a row the owner closed."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from domain.book.state import ChatEventRecord, Entry, EventKind, EventState, Notice, OwnerBook, wait_under_way
from domain.bounds import NOTICE_ABOUT_MAX, cut
from domain.messages.signals import AUTHORIZATION_QUESTION_ID
from domain.rows import RowState

# The backoff between offers while the chat is busy or down; a chat that says it turned idle ends it at once, so the
# longest wait only bounds a chat that never says so (and costs a busy hour about 14 offers, where 5 minutes cost 20).
BACKOFF_FIRST = timedelta(seconds=2)
BACKOFF_MAX = timedelta(minutes=10)
# An event the chat could not take for this long is given up: the outcomes stay unreported and appear in
# the chat's next instruction anyway (seed: "a lost event leaves the outcome for the next owner message").
OFFER_GIVE_UP = timedelta(hours=1)


# The states of an event the outbox offers again after its backoff.
OFFERED_AGAIN = frozenset({EventState.PENDING, EventState.ATTEMPTING, EventState.FAILED, EventState.UNCERTAIN})
# Its record in the store changes at each offer, at most a backoff plus an offer's bound apart: one unchanged for
# longer was given up (or its coordinator is gone) and waits for nothing.
STILL_OFFERED = BACKOFF_MAX + timedelta(minutes=1)


def unannounced(book: OwnerBook) -> list[str]:
    return [e.helper_id for e in book._by_seq() if e.state is RowState.UNREPORTED and not e.announced]


def due(book: OwnerBook) -> bool:
    """An event is waiting to be offered: the one in flight, new unannounced outcomes, or a notice."""
    event = book.event
    if event is not None and event.state is not EventState.DELIVERED:
        return bool(event.helper_ids)
    return bool(unannounced(book)) or bool(book.notices)


def next_event(book: OwnerBook) -> ChatEventRecord | None:
    """The event to offer now: the one in flight, or a new one for every unannounced outcome, or the next notice.
    What has nothing left to tell is withdrawn first, whichever change ended it (an answer, a close, a removal)."""
    withdraw_settled(book)
    if book.event is not None and book.event.state is not EventState.DELIVERED:
        return book.event
    pending = unannounced(book)
    if pending:
        book.event = ChatEventRecord(key=f"helpers-ready:{book.owner}:{book.next_event_seq}", helper_ids=pending)
        book.next_event_seq += 1
        return book.event
    if book.notices:
        notice = book.notices.pop(0)
        book.event = ChatEventRecord(key=notice.key, helper_ids=[notice.helper_id], kind=notice.kind)
        return book.event
    return None


def queue_notice(book: OwnerBook, kind: EventKind, entry: Entry) -> None:
    """A reminder or an expiry to tell the chat once; its key names the admission (`seq`, never reused by another
    helper of this id) and, for a reminder, which one it is."""
    number = entry.reminders_sent if kind is EventKind.REMINDER else 1
    key = f"helper-{kind.value}:{book.owner}:{entry.seq}:{number}"
    book.notices.append(Notice(kind=kind, helper_id=entry.helper_id, key=key))


def withdraw_settled(book: OwnerBook) -> None:
    """Every change that takes an outcome out of "unreported" (delivered, closed) ends with this: the outcomes of
    the event in flight that are no longer unreported leave it, and an event left with none is withdrawn (its key
    waits in `book.withdrawn` until the store says so). An event the chat received is history: never edited."""
    book.notices = [n for n in book.notices if _still_told(book, n.kind, n.helper_id)]
    event = book.event
    if event is None or event.state is EventState.DELIVERED:
        return
    event.helper_ids = [helper_id for helper_id in event.helper_ids if _still_told(book, event.kind, helper_id)]
    if not event.helper_ids:
        book.event = None
        book.withdrawn.append(event.key)


def take_withdrawn(book: OwnerBook) -> list[str]:
    """The keys of withdrawn events whose state the store does not show yet; taken once."""
    keys, book.withdrawn = book.withdrawn, []
    return keys


def _still_told(book: OwnerBook, kind: EventKind, helper_id: str) -> bool:
    """Whether an event of this kind still has something to tell of this helper."""
    entry = book.entries.get(helper_id)
    if entry is None:
        return False
    if kind is EventKind.READY:
        return entry.state is RowState.UNREPORTED
    if kind is EventKind.REMINDER:
        return wait_under_way(entry)
    return entry.state is RowState.EXPIRED


def abandon(book: OwnerBook) -> None:
    """Give up offering the current event; its outcomes stay unreported for the chat's next instruction."""
    if book.event is None:
        return
    _announced(book, book.event)
    book.event = None  # its last attempt's state stays in the store's chat_events


def delivered(book: OwnerBook, receipt_id: str) -> None:
    if book.event is None:
        return
    book.event.state = EventState.DELIVERED
    book.event.receipt_id = receipt_id
    _announced(book, book.event)


def _announced(book: OwnerBook, event: ChatEventRecord) -> None:
    """A ready event's outcomes are announced once it was delivered or given up on; a notice announces nothing."""
    if event.kind is not EventKind.READY:
        return
    for helper_id in event.helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            entry.announced = True


def start_offer(event: ChatEventRecord, now: datetime) -> None:
    event.state = EventState.ATTEMPTING
    event.first_offered_at = event.first_offered_at or now


class OfferOutcome(StrEnum):
    DELIVERED = "delivered"  # the chat gave its receipt
    RETRY = "retry"  # busy, down or uncertain: offer again after a backoff
    GIVEN_UP = "given_up"  # offered for too long: the outcomes stay unreported for the next turn
    WITHDRAWN = "withdrawn"  # none of its outcomes is unreported any more: nothing is left to offer


def record_offer(
    book: OwnerBook,
    event: ChatEventRecord,
    state: EventState,
    receipt_id: str | None,
    error: str | None,
    now: datetime,
    give_up_after: timedelta,
) -> OfferOutcome:
    """One offer's answer: delivered needs the chat's receipt (evidence); otherwise retry or give up. An event
    withdrawn while it was offered is not offered again; if the chat took it after all, the store keeps its
    receipt instead of "withdrawn"."""
    event.attempts += 1
    if book.event is not event:
        if state is EventState.DELIVERED and receipt_id and event.key in book.withdrawn:
            book.withdrawn.remove(event.key)
        return OfferOutcome.WITHDRAWN
    if state is EventState.DELIVERED and receipt_id:
        delivered(book, receipt_id)
        return OfferOutcome.DELIVERED
    # "Delivered" needs the chat's receipt as evidence (R26): without one the chat may or may not have it.
    event.state = EventState.UNCERTAIN if state is EventState.DELIVERED else state
    event.last_error = error
    if event.first_offered_at is not None and now - event.first_offered_at >= give_up_after:
        abandon(book)
        return OfferOutcome.GIVEN_UP
    return OfferOutcome.RETRY


def waits_for(book: OwnerBook, event: ChatEventRecord) -> tuple[str | None, str | None]:
    """A notice's wait, `question` or `authorization`, and what it asked: the action to authorize, or the
    question's id and its options; (None, None) for a ready event."""
    entry = book.entries.get(event.helper_ids[0]) if event.helper_ids else None
    if event.kind is EventKind.READY or entry is None or entry.asked is None:
        return None, None
    asked = entry.asked
    if asked.question_id == AUTHORIZATION_QUESTION_ID:
        return "authorization", cut(asked.grant or "-", NOTICE_ABOUT_MAX)
    labels = " / ".join(option.label for option in asked.choices.options) if asked.choices is not None else ""
    return "question", cut(f"{asked.question_id}: {labels}" if labels else asked.question_id, NOTICE_ABOUT_MAX)


def language_of(book: OwnerBook, helper_ids: list[str]) -> str:
    """The language of a system event: its first helper's (they are one owner's)."""
    for helper_id in helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            return entry.language
    return "en"
