"""Every wait for the owner ends (R54): reminders at their offsets from delivery, a distinct `expired` at the bound, one
end when an answer, a close or the expiry race, and the chat told through the outbox."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.book import (
    EventKind,
    EventState,
    OwnerBook,
    Refusal,
    RefusalCode,
    admission,
    answering,
    closing,
    outbox,
    retention,
    waits,
)
from domain.book.state import ExpiredWait
from domain.limits import Policy, WaitPolicy
from domain.messages.signals import AUTHORIZATION_QUESTION_ID
from domain.messages.updates import OwnerAnswer
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest, RequestError
from domain.rows import RowState
from tests.unit.test_owner_book import ANSWERED_AT, T0, WALK, asked_book, book_of, deliver, request, take

HOUR = timedelta(hours=1)
# Reminders 2 h and 12 h after delivery, expiry at 24 h: the defaults.
DELIVERED = T0 + HOUR


def delivered_question(kind: OutcomeKind = OutcomeKind.QUESTION) -> OwnerBook:
    book = asked_book(kind)
    deliver(book, "h1", DELIVERED)
    return book


def offered(book: OwnerBook) -> list[tuple[str, list[str]]]:
    """Every event the outbox offers, each taken as delivered, in order: (kind, helper ids)."""
    told = []
    while (event := outbox.next_event(book)) is not None:
        told.append((event.kind.value, list(event.helper_ids)))
        outbox.delivered(book, f"receipt-{event.key}")
    return told


def test_a_delivered_question_is_reminded_at_each_offset_then_expires_and_the_chat_hears_each_once() -> None:
    book = delivered_question()
    entry = book.entries["h1"]
    assert entry.wait_ends_at == DELIVERED + timedelta(milliseconds=Policy().keep_ms)
    assert waits.next_moment(book) == DELIVERED + 2 * HOUR
    assert waits.come_due(book, DELIVERED + 2 * HOUR - timedelta(seconds=1)).reminded == []
    assert [e.helper_id for e in waits.come_due(book, DELIVERED + 2 * HOUR).reminded] == ["h1"]
    assert waits.come_due(book, DELIVERED + 3 * HOUR).reminded == []  # each reminder once
    assert waits.next_moment(book) == DELIVERED + 12 * HOUR
    waits.come_due(book, DELIVERED + 12 * HOUR)
    assert offered(book) == [("reminder", ["h1"]), ("reminder", ["h1"])]
    assert waits.next_moment(book) == entry.wait_ends_at
    due = waits.come_due(book, DELIVERED + 24 * HOUR)
    assert [e.helper_id for e in due.expired] == ["h1"]
    assert entry.state is RowState.EXPIRED and entry.expired_at == DELIVERED + 24 * HOUR
    assert offered(book) == [("expired", ["h1"])]
    assert waits.next_moment(book) is None
    assert waits.come_due(book, DELIVERED + 48 * HOUR).expired == []


def test_reminders_that_fell_due_while_nobody_looked_are_one_and_a_wait_past_its_bound_only_expires() -> None:
    book = delivered_question()
    waits.come_due(book, DELIVERED + 13 * HOUR)
    assert offered(book) == [("reminder", ["h1"])]
    other = delivered_question()
    due = waits.come_due(other, DELIVERED + 30 * HOUR)
    assert due.reminded == [] and [e.helper_id for e in due.expired] == ["h1"]
    assert offered(other) == [("expired", ["h1"])]


def test_a_wait_starts_at_delivery_not_before() -> None:
    book = asked_book()
    assert book.entries["h1"].wait_ends_at is None and waits.next_moment(book) is None
    assert waits.come_due(book, T0 + 100 * HOUR).expired == []
    assert book.entries["h1"].state is RowState.UNREPORTED


def test_an_answer_ends_the_wait_and_withdraws_a_reminder_not_yet_offered() -> None:
    book = delivered_question()
    waits.come_due(book, DELIVERED + 2 * HOUR)
    take(book, WALK)
    assert offered(book) == []
    assert waits.next_moment(book) is None
    assert waits.come_due(book, DELIVERED + 30 * HOUR).expired == []
    assert book.entries["h1"].state is RowState.DELIVERED


def test_an_answer_after_expiry_is_refused_expired_naming_when_and_also_once_the_row_is_gone() -> None:
    book = delivered_question()
    expired_at = DELIVERED + 24 * HOUR
    waits.come_due(book, expired_at)
    judged = answering.judge(book, "anna", "h1", WALK, arrived_at=expired_at + HOUR)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.EXPIRED
    assert "2026-03-02 10:00 UTC" in judged.message
    entry = book.entries["h1"]
    assert retention.removable(entry) and entry.keep_until == expired_at + timedelta(milliseconds=Policy().keep_ms)
    retention.forget(book, retention.expired(book, entry.keep_until))
    assert "h1" not in book.entries
    assert book.recently_expired == [ExpiredWait(helper_id="h1", expired_at=expired_at)]
    late = answering.judge(book, "anna", "h1", WALK, arrived_at=expired_at + 30 * HOUR)
    assert isinstance(late, Refusal) and late.code is RefusalCode.EXPIRED


def test_an_answer_racing_the_expiry_has_one_end_whichever_the_book_takes_first() -> None:
    answered_first = delivered_question()
    take(answered_first, WALK)
    assert waits.come_due(answered_first, DELIVERED + 24 * HOUR).expired == []
    assert answered_first.entries["h1"].answer == WALK
    expired_first = delivered_question()
    waits.come_due(expired_first, DELIVERED + 24 * HOUR)
    judged = answering.judge(expired_first, "anna", "h1", WALK, arrived_at=ANSWERED_AT + 24 * HOUR)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.EXPIRED
    assert expired_first.entries["h1"].answer is None


def test_a_close_ends_the_wait_and_a_close_after_expiry_removes_the_row() -> None:
    closed = delivered_question()
    assert closing.decide(closed, "h1") is closing.CloseAction.REMOVE
    closing.closed_for_removal(closed, "h1")
    assert waits.come_due(closed, DELIVERED + 24 * HOUR).expired == []
    expired = delivered_question()
    waits.come_due(expired, DELIVERED + 24 * HOUR)
    assert closing.decide(expired, "h1") is closing.CloseAction.REMOVE


def test_an_expiry_not_yet_offered_when_the_owner_closes_the_row_is_withdrawn() -> None:
    book = delivered_question()
    waits.come_due(book, DELIVERED + 24 * HOUR)
    closing.closed_for_removal(book, "h1")
    retention.forget(book, ["h1"])
    assert offered(book) == []


def test_a_reminder_the_chat_was_too_busy_for_is_withdrawn_once_the_owner_answers() -> None:
    """R54: a reminder offered while the chat is busy waits out its backoff; answered meanwhile, it is never offered
    again, and the store learns that it was withdrawn."""
    book = delivered_question()
    waits.come_due(book, DELIVERED + 2 * HOUR)
    event = outbox.next_event(book)
    assert event is not None and event.kind is EventKind.REMINDER
    outbox.start_offer(event, DELIVERED + 2 * HOUR)
    busy = outbox.record_offer(
        book, event, EventState.PENDING, None, "chat busy", DELIVERED + 2 * HOUR, outbox.OFFER_GIVE_UP
    )
    assert busy is outbox.OfferOutcome.RETRY
    take(book, WALK)
    assert outbox.next_event(book) is None
    assert outbox.take_withdrawn(book) == [event.key]


def test_the_policy_sets_the_offsets_and_the_bound_and_a_reminder_at_or_past_the_bound_never_comes() -> None:
    book = OwnerBook(
        owner="anna", policy=Policy(wait=WaitPolicy(remind_after_ms=(60_000, 600_000), expire_after_ms=600_000))
    )
    book.entries.update(asked_book().entries)
    deliver(book, "h1", DELIVERED)
    assert book.entries["h1"].wait_ends_at == DELIVERED + timedelta(minutes=10)
    waits.come_due(book, DELIVERED + timedelta(minutes=1))
    assert offered(book) == [("reminder", ["h1"])]
    assert waits.next_moment(book) == DELIVERED + timedelta(minutes=10)
    assert WaitPolicy(expire_after_ms=10 * Policy().keep_ms).expires_after_ms(Policy().keep_ms) == Policy().keep_ms


def test_an_authorization_reminder_names_the_action_and_its_expiry_is_never_a_denial() -> None:
    book = delivered_question(OutcomeKind.AUTHORIZATION)
    waits.come_due(book, DELIVERED + 24 * HOUR)
    event = outbox.next_event(book)
    assert event is not None and event.kind is EventKind.EXPIRED
    assert outbox.waits_for(book, event) == ("authorization", "send_mail to bob@example.com")
    assert book.entries["h1"].answer is None
    deny = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.DENY)
    judged = answering.judge(book, "anna", "h1", deny, arrived_at=DELIVERED + 25 * HOUR)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.EXPIRED


def test_notice_keys_name_the_admission_so_a_reused_helper_id_is_told_again() -> None:
    book = delivered_question()
    waits.come_due(book, DELIVERED + 2 * HOUR)
    event = outbox.next_event(book)
    assert event is not None
    assert event.key == f"helper-reminder:anna:{book.entries['h1'].seq}:1"


def test_an_admission_with_its_own_wait_keeps_it_and_a_follow_up_without_one_takes_its_earlier_helpers() -> None:
    """R54: the request's `wait` is the helper's; a follow-up without one (an answer's, or one started by hand)
    takes the question's; one with its own keeps it."""
    own = WaitPolicy(remind_after_ms=(60_000,), expire_after_ms=600_000)
    book = book_of()
    asked_request = request("h1").model_copy(update={"wait": own})
    decision = admission.judge(book, asked_request)
    assert isinstance(decision, admission.Admit)
    assert admission.take(book, asked_request, decision, T0, 1_000).wait == own
    follow = request("h2").model_copy(update={"follow_up": "h1"})
    assert admission.wait_policy(book, follow) == own
    theirs = WaitPolicy(expire_after_ms=60_000)
    assert admission.wait_policy(book, follow.model_copy(update={"wait": theirs})) == theirs
    assert admission.wait_policy(book, request("h3")) is None


def test_a_wait_that_outlives_its_row_is_an_invalid_request_naming_the_field_and_nothing_is_admitted() -> None:
    book = book_of(keep_ms=3_600_000)
    long = request("h1").model_copy(update={"wait": WaitPolicy(expire_after_ms=7_200_000)})
    judged = admission.judge(book, long)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.INVALID_REQUEST
    assert "wait.expire_after_ms" in judged.message and book.entries == {}
    with pytest.raises(RequestError, match=r"wait\.remind_after_ms\.0"):
        HelperRequest.parse({**request("h1").model_dump(), "wait": {"remind_after_ms": [0]}})
    with pytest.raises(RequestError, match=r"wait\.remind_after_ms: Tuple should have at most 5 items"):
        HelperRequest.parse({**request("h1").model_dump(), "wait": {"remind_after_ms": [1, 2, 3, 4, 5, 6]}})


def test_an_answer_at_the_bound_before_the_timer_wrote_the_expiry_is_refused_expired_and_the_expiry_agrees() -> None:
    book = delivered_question()
    bound = DELIVERED + 24 * HOUR
    just_before = answering.judge(book, "anna", "h1", WALK, arrived_at=bound - timedelta(milliseconds=1))
    assert not isinstance(just_before, Refusal)
    at_bound = answering.judge(book, "anna", "h1", WALK, arrived_at=bound)
    assert isinstance(at_bound, Refusal) and at_bound.code is RefusalCode.EXPIRED
    assert "2026-03-02 10:00 UTC" in at_bound.message and book.entries["h1"].answer is None
    # The timer came a minute late (a worker was down): the row says it expired at the bound it was refused at.
    waits.come_due(book, bound + timedelta(minutes=1))
    assert book.entries["h1"].expired_at == bound
