"""How a wait for the owner ended, as the book decides it (R56): one end per wait, of the right kind, with what was
asked and what was answered or granted; the digest of what was shown."""

from __future__ import annotations

import pytest

from domain.audit import WaitEndKind, WaitKind, WaitRecord, shown_digest
from domain.book import answering, audit, closing
from domain.messages.signals import AUTHORIZATION_QUESTION_ID
from domain.messages.updates import Decider, OwnerAnswer
from domain.outcome import OutcomeKind
from tests.unit.test_owner_book import ANSWERED_AT, T0, VENUE, WALK, asked_book, deliver, take

GRANT = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id="grant")
DENY = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id="deny")
OWNER = Decider(by="owner", via="telegram", through="api")


def test_an_answered_question_ends_answered_with_the_answer_and_who_gave_it() -> None:
    book = asked_book()
    entry = book.entries["h1"]
    assert audit.takes_answer(entry)
    take(book, WALK)
    assert not audit.takes_answer(entry)
    end = audit.answered(entry, ANSWERED_AT, OWNER, "h1.answer")
    assert (end.ended, end.kind, end.question_id, end.answer) == (
        WaitEndKind.ANSWERED,
        WaitKind.QUESTION,
        "venue",
        WALK,
    )
    assert (end.decider, end.follow_up, end.granted) == (OWNER, "h1.answer", None)


def test_an_authorization_ends_granted_with_the_item_asked_or_denied_with_nothing_granted() -> None:
    granted = asked_book(OutcomeKind.AUTHORIZATION)
    take(granted, GRANT)
    end = audit.answered(granted.entries["h1"], ANSWERED_AT, None, "h1.answer")
    assert (end.ended, end.kind) == (WaitEndKind.GRANTED, WaitKind.AUTHORIZATION)
    assert end.asked_grant == end.granted == "send_mail to bob@example.com"
    denied = asked_book(OutcomeKind.AUTHORIZATION)
    take(denied, DENY)
    end = audit.answered(denied.entries["h1"], ANSWERED_AT, None, None)
    assert (end.ended, end.asked_grant, end.granted) == (WaitEndKind.DENIED, "send_mail to bob@example.com", None)


def test_a_removal_ends_only_the_waits_that_still_took_an_answer() -> None:
    book = asked_book()
    deliver(book, "h1", T0)
    [end] = audit.ended_by_removal([book.entries["h1"]], WaitEndKind.CLOSED, T0)
    assert end.ended is WaitEndKind.CLOSED and end.answer is None
    closing.closed_for_removal(book, "h1")
    assert audit.ended_by_removal([book.entries["h1"]], WaitEndKind.CLOSED, T0) == []
    answered = asked_book()
    take(answered, WALK)
    assert audit.ended_by_removal([answered.entries["h1"]], WaitEndKind.REMOVED, T0) == []
    completed = asked_book(OutcomeKind.COMPLETED)
    assert audit.ended_by_removal(list(completed.entries.values()), WaitEndKind.REMOVED, T0) == []


def test_the_digest_changes_with_any_part_of_what_was_shown() -> None:
    digest = shown_digest("Walk or taxi?", VENUE)
    assert digest == shown_digest("Walk or taxi?", VENUE) and len(digest) == 64
    assert digest != shown_digest("Walk or taxi?!", VENUE)
    assert digest != shown_digest("Walk or taxi?", None)
    relabelled = VENUE.model_copy(update={"options": [VENUE.options[1], VENUE.options[0]]})
    assert digest != shown_digest("Walk or taxi?", relabelled)


@pytest.mark.parametrize("ended", list(WaitEndKind))
@pytest.mark.parametrize("language", ["en", "ru"])
def test_a_late_answer_is_refused_with_how_its_wait_ended_in_the_owners_language(
    ended: WaitEndKind, language: str
) -> None:
    record = WaitRecord(
        owner="anna",
        helper_id="h1",
        seq=1,
        kind=WaitKind.QUESTION,
        question_id="venue",
        ended=ended,
        ended_at=ANSWERED_AT,
        language=language,
        shown_text="Walk or taxi?",
        shown_sha256=shown_digest("Walk or taxi?", None),
    )
    late = answering.late(record)
    assert late.code == ("expired" if ended is WaitEndKind.EXPIRED else "wait_ended")
    assert "h1" in late.message and "2026-03-02 09:00 UTC" in late.message
    assert ("помощника" in late.message) == (language == "ru")
