"""Follow-ups in the owner book: who may be followed up, once, and what the admission changes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.follow_ups import create_request, grant_of
from domain.book import OwnerBook, Refusal, RefusalCode, admission, closing, slots
from domain.boundary import GrantedAction, action_digest, parse_item
from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest, RequestError
from domain.rows import HelperRow, RowState
from domain.run.follow_up_task import CARRIED_CONTEXT_MAX_CHARS, carried_task
from tests.helpers import admitted_row
from tests.unit.test_owner_book import HARD_MS, KEEP, T0, admit, book_of, deliver, finish


def follow_up(helper_id: str, earlier: str, language: str = "en") -> HelperRequest:
    return HelperRequest(
        owner="anna", helper_id=helper_id, task="the blue venue", model="m", follow_up=earlier, language=language
    )


def finished_book(kind: OutcomeKind, **policy: int) -> OwnerBook:
    book = book_of(**policy)
    admit(book, "h1")
    finish(book, "h1", kind)
    return book


def admit_follow_up(book: OwnerBook, helper_id: str, earlier: str) -> None:
    decision = admission.decide(book, follow_up(helper_id, earlier))
    assert isinstance(decision, admission.Admit), decision
    admission.take(book, follow_up(helper_id, earlier), decision, T0 + timedelta(minutes=5), HARD_MS)
    slots.grant(book, T0)


@pytest.mark.parametrize("kind", [OutcomeKind.QUESTION, OutcomeKind.AUTHORIZATION, OutcomeKind.PARTIAL])
def test_an_outcome_that_waits_for_the_owner_can_be_followed_up_and_is_then_delivered(kind: OutcomeKind) -> None:
    book = finished_book(kind)
    assert book.entries["h1"].state is RowState.UNREPORTED
    generation = book.entries["h1"].generation

    admit_follow_up(book, "h2", "h1")

    earlier, later = book.entries["h1"], book.entries["h2"]
    assert (earlier.followed_up_by, later.follow_up_of) == ("h2", "h1")
    assert earlier.state is RowState.DELIVERED
    assert earlier.delivered_at == T0 + timedelta(minutes=5)
    assert earlier.keep_until == earlier.delivered_at + KEEP
    assert earlier.generation == generation + 1  # the store write is guarded by it
    assert later.state is RowState.RUNNING  # admitted like any other helper: it takes a free slot


def test_an_already_delivered_outcome_can_be_followed_up_and_stays_delivered() -> None:
    book = finished_book(OutcomeKind.QUESTION)
    deliver(book, "h1")
    delivered_at = book.entries["h1"].delivered_at

    admit_follow_up(book, "h2", "h1")

    assert book.entries["h1"].state is RowState.DELIVERED
    assert book.entries["h1"].delivered_at == delivered_at


@pytest.mark.parametrize("kind", [OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.INTERRUPTED])
def test_an_outcome_that_waits_for_nobody_is_refused_as_not_followable(kind: OutcomeKind) -> None:
    book = finished_book(kind)
    decision = admission.decide(book, follow_up("h2", "h1"))
    assert isinstance(decision, Refusal)
    assert decision.code is RefusalCode.NOT_FOLLOWABLE
    assert "h1" in decision.message and "question" in decision.message
    assert "h2" not in book.entries  # nothing was written


def test_a_running_helper_a_closed_one_and_an_unknown_one_cannot_be_followed_up() -> None:
    book = book_of()
    admit(book, "h1")
    running = admission.decide(book, follow_up("h2", "h1"))
    assert isinstance(running, Refusal) and running.code is RefusalCode.NOT_FOLLOWABLE
    assert "still working" in running.message

    unknown = admission.decide(book, follow_up("h2", "nobody", language="ru"))
    assert isinstance(unknown, Refusal) and unknown.code is RefusalCode.UNKNOWN_HELPER
    assert "nobody" in unknown.message and "Помощника" in unknown.message

    closed = finished_book(OutcomeKind.QUESTION)
    closing.request(closed, "h1")
    refused = admission.decide(closed, follow_up("h2", "h1"))
    assert isinstance(refused, Refusal) and refused.code is RefusalCode.NOT_FOLLOWABLE
    assert "closed" in refused.message


def test_a_second_follow_up_of_the_same_outcome_answers_with_the_first() -> None:
    book = finished_book(OutcomeKind.QUESTION)
    admit_follow_up(book, "h2", "h1")

    again = admission.decide(book, follow_up("h3", "h1"))

    assert isinstance(again, admission.AlreadyAdmitted)
    assert again.entry.helper_id == "h2"
    assert "h3" not in book.entries


def test_a_follow_up_counts_as_open_like_any_helper() -> None:
    book = finished_book(OutcomeKind.QUESTION, max_open=2)
    admit(book, "h2")
    admit(book, "h3")
    decision = admission.decide(book, follow_up("h4", "h1"))
    assert isinstance(decision, Refusal) and decision.code is RefusalCode.TOO_MANY_OPEN
    assert book.entries["h1"].followed_up_by is None


def test_the_earlier_row_is_not_evicted_while_its_follow_up_is_open() -> None:
    book = finished_book(OutcomeKind.QUESTION, max_rows=3)
    admit_follow_up(book, "h2", "h1")  # h1 is now delivered: evictable, were it not for h2
    assert admission.rows_to_evict(book, room_needed=1) == []  # 2 rows, room for a third
    assert admission.rows_to_evict(book, room_needed=2) is None
    finish(book, "h2", OutcomeKind.COMPLETED)
    assert admission.rows_to_evict(book, room_needed=2) == ["h1"]


def test_a_follow_up_never_evicts_the_row_it_continues() -> None:
    """R3: rows are full and the oldest delivered row is the very one a follow-up continues: another row makes room,
    or the follow-up is refused; its earlier row, which it reads its context from, stays."""
    book = finished_book(OutcomeKind.PARTIAL, max_rows=2, max_open=2)
    deliver(book, "h1")
    admit(book, "h2")  # running: not evictable, so only h1 could make room
    decision = admission.decide(book, follow_up("f1", "h1"))
    assert isinstance(decision, Refusal) and decision.code is RefusalCode.ROWS_FULL, decision
    assert "h1" in book.entries


def test_an_admission_undone_puts_the_earlier_helper_back_as_it_was() -> None:
    book = finished_book(OutcomeKind.QUESTION)
    before = book.entries["h1"].model_copy(deep=True)
    admit_follow_up(book, "h2", "h1")

    admission.undo(book, "h2", [], before)

    assert book.entries["h1"] == before
    assert "h2" not in book.entries
    assert isinstance(admission.decide(book, follow_up("h2", "h1")), admission.Admit)  # it can be tried again


def test_a_request_cannot_follow_itself_up_nor_be_a_goal_check() -> None:
    with pytest.raises(RequestError) as itself:
        HelperRequest.parse({"owner": "anna", "helper_id": "h1", "task": "t", "model": "m", "follow_up": "h1"})
    assert "cannot follow itself up" in str(itself.value)
    with pytest.raises(RequestError) as goal:
        HelperRequest.parse(
            {"owner": "anna", "helper_id": "h1", "task": "t", "model": "m", "follow_up": "h0", "goal_id": "g"}
        )
    assert "Goal check cannot be a follow-up" in str(goal.value)
    with pytest.raises(RequestError) as bad_id:
        HelperRequest.parse({"owner": "anna", "helper_id": "h1", "task": "t", "model": "m", "follow_up": "../x"})
    assert "follow-up helper id" in str(bad_id.value)


def test_the_carried_task_holds_the_earlier_outcome_and_the_answer_in_the_owners_language() -> None:
    task = carried_task(
        language="ru", earlier_id="h1", earlier_kind=OutcomeKind.QUESTION, earlier_text="Which venue?", answer="Blue"
    )
    assert task.index("Which venue?") < task.index("Blue")
    assert "вопросом" in task

    long = carried_task(
        language="en", earlier_id="h1", earlier_kind=OutcomeKind.PARTIAL, earlier_text="x" * 100_000, answer="go on"
    )
    assert len(long) < CARRIED_CONTEXT_MAX_CHARS + 1_000
    assert long.endswith("go on") and "left out" in long

    gone = carried_task(language="en", earlier_id="h1", earlier_kind=None, earlier_text=None, answer="go on")
    assert "no longer kept" in gone and gone.endswith("go on")


def test_work_asked_for_again_after_an_expired_wait_says_it_expired_unanswered_never_denied() -> None:
    """R54: a follow-up of an authorization that expired tells the model nothing was done, not that it was denied."""
    for language in ("en", "ru"):
        task = carried_task(
            language=language,
            earlier_id="h1",
            earlier_kind=OutcomeKind.AUTHORIZATION,
            earlier_text="May I send the mail to carol@example.com?",
            answer="Send it now.",
            expired=True,
        )
        said = task.lower()
        assert ("expired unanswered" in said) if language == "en" else ("истёк без ответа" in said)
        assert "denied" not in said.replace("not denied", "") and "отказано" not in said


GRANTED = GrantedAction(action="send_mail to bob@example.com", asked="send_mail to bob@example.com, carol@example.com")


def granted_row(seq: int = 4) -> HelperRow:
    return admitted_row(
        "anna",
        "offer.answer",
        at=T0,
        seq=seq,
        follow_up_of="offer",
        boundary=["create_event with bob@example.com"],
        granted_action=GRANTED,
    )


def test_a_grant_goes_to_a_core_that_honours_it_once_bound_to_its_action_and_admission() -> None:
    """R55: the create carries the grant (its action, the action's digest, an id of the admission), not a wider
    boundary; every create of this admission names the same grant, another admission another."""
    row = granted_row()
    created = create_request(row, "key", Limits(), grants_honoured=True)
    [grant] = created.grants
    assert created.boundary == ["create_event with bob@example.com"]
    assert (grant.action, grant.digest) == (GRANTED.action, action_digest(parse_item(GRANTED.action)))
    assert create_request(row, "key", Limits(), continue_from="s-1", grants_honoured=True).grants == [grant]
    assert grant_of(granted_row(seq=5)).id != grant.id


def test_a_core_without_grants_gets_the_action_granted_in_the_boundary() -> None:
    """R55: the fallback is the grant as it was before the capability: one more boundary item."""
    created = create_request(granted_row(), "key", Limits())
    assert created.grants == []
    assert created.boundary == ["create_event with bob@example.com", GRANTED.action]
    assert "grants" not in created.model_dump(mode="json")  # a core without the field never sees it


def test_only_a_follow_up_carries_a_grant_and_it_must_parse() -> None:
    with pytest.raises(RequestError, match="only a follow-up carries a grant"):
        HelperRequest.parse({"owner": "anna", "helper_id": "h", "task": "t", "model": "m", "granted_action": GRANTED})
    unparsed = GrantedAction(action="mail everyone", asked=GRANTED.asked)
    with pytest.raises(RequestError, match=r"granted_action\.action"):
        HelperRequest.parse(
            {"owner": "anna", "helper_id": "h", "task": "t", "model": "m", "follow_up": "o", "granted_action": unparsed}
        )
