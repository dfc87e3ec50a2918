"""The chat outbox (R26): one system event at a time for every unannounced outcome, offered while the chat
is idle, with a key that makes a repeat harmless; given up after a while, its outcomes stay unreported. An
event announces only outcomes still unreported: one none of whose outcomes is (all read and delivered, or
closed) is withdrawn, never offered again (R22)."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from domain.book.state import ChatEventRecord, EventState, OwnerBook
from domain.rows import RowState

# The backoff between offers while the chat is busy or down; a chat that says it turned idle ends it at once.
BACKOFF_FIRST = timedelta(seconds=2)
BACKOFF_MAX = timedelta(minutes=5)
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
    """An event is waiting to be offered: the one in flight, or new unannounced outcomes."""
    event = book.event
    if event is not None and event.state is not EventState.DELIVERED:
        return bool(event.helper_ids)
    return bool(unannounced(book))


def next_event(book: OwnerBook) -> ChatEventRecord | None:
    """The event to offer now: the one in flight, or a new one for every unannounced outcome."""
    if book.event is not None and book.event.state is not EventState.DELIVERED:
        return book.event
    pending = unannounced(book)
    if not pending:
        return None
    book.event = ChatEventRecord(key=f"helpers-ready:{book.owner}:{book.next_event_seq}", helper_ids=pending)
    book.next_event_seq += 1
    return book.event


def withdraw_settled(book: OwnerBook) -> None:
    """Every change that takes an outcome out of "unreported" (delivered, closed) ends with this: the outcomes of
    the event in flight that are no longer unreported leave it, and an event left with none is withdrawn (its key
    waits in `book.withdrawn` until the store says so). An event the chat received is history: never edited."""
    event = book.event
    if event is None or event.state is EventState.DELIVERED:
        return
    event.helper_ids = [helper_id for helper_id in event.helper_ids if _unreported(book, helper_id)]
    if not event.helper_ids:
        book.event = None
        book.withdrawn.append(event.key)


def take_withdrawn(book: OwnerBook) -> list[str]:
    """The keys of withdrawn events whose state the store does not show yet; taken once."""
    keys, book.withdrawn = book.withdrawn, []
    return keys


def _unreported(book: OwnerBook, helper_id: str) -> bool:
    entry = book.entries.get(helper_id)
    return entry is not None and entry.state is RowState.UNREPORTED


def abandon(book: OwnerBook) -> None:
    """Give up offering the current event; its outcomes stay unreported for the chat's next instruction."""
    if book.event is None:
        return
    for helper_id in book.event.helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            entry.announced = True
    book.event = None  # its last attempt's state stays in the store's chat_events


def delivered(book: OwnerBook, receipt_id: str) -> None:
    if book.event is None:
        return
    book.event.state = EventState.DELIVERED
    book.event.receipt_id = receipt_id
    for helper_id in book.event.helper_ids:
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


def language_of(book: OwnerBook, helper_ids: list[str]) -> str:
    """The language of a system event: its first helper's (they are one owner's)."""
    for helper_id in helper_ids:
        entry = book.entries.get(helper_id)
        if entry is not None:
            return entry.language
    return "en"
