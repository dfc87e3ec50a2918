"""How a wait for the owner ended, as the book decides it (R56): the coordinator hands it to the activity that writes
the row's change, and the store keeps it as the wait's record beside what the row showed."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from domain.audit import WaitEnd, WaitEndKind, WaitKind
from domain.book.answering import GRANT, granted_item
from domain.book.state import Entry
from domain.messages.signals import AUTHORIZATION_QUESTION_ID
from domain.messages.updates import Decider
from domain.rows import RowState


def takes_answer(entry: Entry) -> bool:
    """Its question or authorization still takes an answer: asked, not answered, followed up, closed or expired.
    Before its delivery too: an unreported question can be answered."""
    return (
        entry.asked is not None
        and entry.answer is None
        and entry.followed_up_by is None
        and not entry.close_requested
        and entry.state in (RowState.UNREPORTED, RowState.DELIVERED)
    )


def end_of(
    entry: Entry,
    ended: WaitEndKind,
    at: datetime,
    *,
    decider: Decider | None = None,
    follow_up: str | None = None,
) -> WaitEnd:
    asked = entry.asked
    assert asked is not None, f"{entry.helper_id} asked nothing"
    authorization = asked.question_id == AUTHORIZATION_QUESTION_ID
    return WaitEnd(
        helper_id=entry.helper_id,
        seq=entry.seq,
        kind=WaitKind.AUTHORIZATION if authorization else WaitKind.QUESTION,
        question_id=asked.question_id,
        ended=ended,
        ended_at=at,
        reminders_sent=entry.reminders_sent,
        answer=entry.answer,
        asked_grant=asked.grant,
        granted=granted_item(asked, entry.answer),
        decider=decider or Decider(),
        follow_up=follow_up,
        language=entry.language,
    )


def answered(entry: Entry, at: datetime, decider: Decider | None, follow_up: str | None) -> WaitEnd:
    """The end an answer recorded in `entry` makes: answered, granted or denied."""
    assert entry.answer is not None and entry.asked is not None
    if entry.asked.question_id != AUTHORIZATION_QUESTION_ID:
        ended = WaitEndKind.ANSWERED
    else:
        ended = WaitEndKind.GRANTED if entry.answer.option_id == GRANT else WaitEndKind.DENIED
    return end_of(entry, ended, at, decider=decider, follow_up=follow_up)


def ended_if_waiting(entry: Entry, ended: WaitEndKind, at: datetime, *, follow_up: str | None = None) -> WaitEnd | None:
    """The end of the entry's wait if it still took an answer (closed, followed up by hand, removed), else None."""
    return end_of(entry, ended, at, follow_up=follow_up) if takes_answer(entry) else None


def ended_by_removal(entries: Iterable[Entry], ended: WaitEndKind, at: datetime) -> list[WaitEnd]:
    """The waits that end because their rows go (closed by the owner, removed for room)."""
    return [end for entry in entries if (end := ended_if_waiting(entry, ended, at)) is not None]
