"""The coordinator's pure decisions for one owner (R2-R8, R21-R23, R26-R29)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contracts.core_api import QuestionChoices, QuestionOption
from domain.audit import WaitEndKind
from domain.book import (
    AwaitEarlier,
    Entry,
    EventState,
    OwnerBook,
    Refusal,
    RefusalCode,
    admission,
    answering,
    audit,
    closing,
    delivery,
    outbox,
    retention,
    slots,
)
from domain.book.state import LEASE_MARGIN, summarize_book
from domain.boundary import GrantedAction
from domain.limits import ANSWER_TEXT_MAX_CHARS, Policy
from domain.messages.signals import AUTHORIZATION_QUESTION_ID, PLAIN_QUESTION_ID, FinishedNotice
from domain.messages.updates import OwnerAnswer
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.texts import text

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# When the owner's answers arrive: after every outcome these tests write.
ANSWERED_AT = T0 + timedelta(days=1)
HARD_MS = 2_820_000
KEEP = timedelta(milliseconds=Policy().keep_ms)
VENUE = QuestionChoices(
    question_id="venue",
    options=[QuestionOption(id="walk", label="Walking distance"), QuestionOption(id="taxi", label="Taxi")],
)
WALK = OwnerAnswer(question_id="venue", option_id="walk")


def request(helper_id: str, goal_id: str | None = None, language: str = "en") -> HelperRequest:
    return HelperRequest(owner="anna", helper_id=helper_id, task="task", model="m", goal_id=goal_id, language=language)


def book_of(**policy: int) -> OwnerBook:
    return OwnerBook(owner="anna", policy=Policy(**policy))


def admit(book: OwnerBook, helper_id: str, goal_id: str | None = None, now: datetime = T0) -> list[str]:
    """admission.Admit as the coordinator does: judge, apply, then hand out free slots; returns the grants."""
    decision = admission.judge(book, request(helper_id, goal_id))
    assert isinstance(decision, admission.Admit), decision
    admission.take(book, request(helper_id, goal_id), decision, now, HARD_MS)
    return slots.grant(book, now)


def finish(book: OwnerBook, helper_id: str, kind: OutcomeKind = OutcomeKind.COMPLETED, now: datetime = T0) -> list[str]:
    """A helper's FinishedNotice as the coordinator handles it; returns the grants it caused."""
    generation = book.entries[helper_id].generation + 2
    assert slots.finished(book, FinishedNotice(helper_id=helper_id, kind=kind, generation=generation, finished_at=now))
    return slots.grant(book, now)


def deliver(book: OwnerBook, helper_id: str, now: datetime = T0, turn: str = "turn-1") -> None:
    delivery.read(book, turn, [helper_id])
    assert [e.helper_id for e in delivery.deliver(book, turn, now)] == [helper_id]


def entry(
    helper_id: str,
    seq: int,
    state: RowState,
    *,
    goal_id: str | None = None,
    at: datetime = T0,
    helper_writes: bool | None = None,
) -> Entry:
    """A retained row as the coordinator sees it; finished rows have handed the row back."""
    writes = state.is_open if helper_writes is None else helper_writes
    finished = None if writes else at
    return Entry(
        helper_id=helper_id,
        seq=seq,
        goal_id=goal_id,
        state=state,
        helper_writes=writes,
        holds_slot=state is RowState.RUNNING,
        hard_ceiling_ms=HARD_MS,
        admitted_at=at - timedelta(hours=1),
        finished_at=finished,
        delivered_at=at if state is RowState.DELIVERED else None,
    )


def full_book(*entries: Entry, **policy: int) -> OwnerBook:
    book = book_of(**policy)
    for e in entries:
        book.entries[e.helper_id] = e
        if e.state is RowState.WAITING:
            book.queue.append(e.helper_id)
    book.next_seq = max((e.seq for e in entries), default=0) + 1
    return book


def unreported_rows(count: int, start: int = 1) -> list[Entry]:
    return [entry(f"u{i}", i, RowState.UNREPORTED) for i in range(start, start + count)]


# --- admission: the open limit (R2) ------------------------------------------------------------------


def test_three_open_then_a_fourth_is_refused_naming_the_open_ones() -> None:
    """R2: at most HELPER_MAX_OPEN open helpers; the refusal names the open ones."""
    book = book_of()
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    refusal = admission.decide(book, request("h4"))
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.TOO_MANY_OPEN
    assert refusal.open_ids == ["h1", "h2", "h3"]
    assert refusal.message == text("refused.too_many_open", "en", helper_id="h4", max_open=3, open_ids="h1, h2, h3")
    assert "h4" not in book.entries


def test_refusal_is_in_the_requests_language() -> None:
    """R2, R32: the refusal is written in the owner's language."""
    book = book_of(max_open=1)
    admit(book, "h1")
    refusal = admission.decide(book, request("h2", language="ru"))
    assert isinstance(refusal, Refusal)
    assert refusal.message == text("refused.too_many_open", "ru", helper_id="h2", max_open=1, open_ids="h1")


def test_waiting_helpers_count_as_open() -> None:
    """R2: a helper waiting for a slot is open."""
    book = book_of(max_running=1)
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    assert book.open_ids() == ["h1", "h2", "h3"] and book.queue == ["h2", "h3"]
    assert isinstance(admission.decide(book, request("h4")), Refusal)


def test_a_finished_helper_frees_its_open_place() -> None:
    """R2: finished (unreported) helpers are not open."""
    book = book_of()
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    finish(book, "h2")
    assert book.open_ids() == ["h1", "h3"]
    assert isinstance(admission.decide(book, request("h4")), admission.Admit)


def test_goal_check_leaves_one_open_place() -> None:
    """R2, R30: a Goal check is admitted only if it leaves one open place for an owner helper."""
    book = book_of()
    admit(book, "h1")
    admit(book, "g1", goal_id="weekly")  # 2 of 3 open: one place left
    refusal = admission.decide(book, request("g2", goal_id="weekly"))
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.GOAL_NEEDS_OPEN_PLACE
    assert refusal.open_ids == ["h1", "g1"]
    assert refusal.message == text("refused.goal_needs_open_place", "en", helper_id="g2", max_open=3, open_ids="h1, g1")
    # The owner's own helper still gets the last place.
    assert isinstance(admission.decide(book, request("h2")), admission.Admit)


def test_goal_check_with_one_open_place_is_refused() -> None:
    """R2: max_open 2, one open: a Goal check would take the last place."""
    book = book_of(max_open=2)
    admit(book, "h1")
    decision = admission.decide(book, request("g1", goal_id="weekly"))
    assert isinstance(decision, Refusal) and decision.code is RefusalCode.GOAL_NEEDS_OPEN_PLACE


# --- admission: idempotency (R5) -----------------------------------------------------------------


def test_same_helper_id_is_already_admitted() -> None:
    """R5: the same helper id returns the existing helper; nothing is admitted twice."""
    book = book_of()
    admit(book, "h1")
    before = book.model_dump()
    decision = admission.decide(book, request("h1"))
    assert isinstance(decision, admission.AlreadyAdmitted)
    assert decision.entry is book.entries["h1"]
    assert book.model_dump() == before


def test_same_helper_id_is_already_admitted_even_when_full() -> None:
    """R5: idempotency comes before the limits: a repeat of an admitted request is never refused."""
    book = book_of(max_open=1)
    admit(book, "h1")
    assert isinstance(admission.decide(book, request("h2")), Refusal)
    assert isinstance(admission.decide(book, request("h1")), admission.AlreadyAdmitted)
    finish(book, "h1")
    assert isinstance(admission.decide(book, request("h1")), admission.AlreadyAdmitted)


# --- admission: the row limit (R3) -----------------------------------------------------------------


def test_rows_full_of_unevictable_rows_refuses() -> None:
    """R3: pending, running, unreported and Goal rows are never removed; nothing to remove: refused."""
    rows = [
        entry("w1", 1, RowState.WAITING),
        entry("r1", 2, RowState.RUNNING),
        entry("gd", 3, RowState.DELIVERED, goal_id="weekly"),
        entry("gc", 4, RowState.CLOSED, goal_id="weekly"),
        *unreported_rows(16, start=5),
    ]
    book = full_book(*rows)
    assert len(book.entries) == 20
    assert admission.rows_to_evict(book, 1) is None
    refusal = admission.decide(book, request("new"))
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.ROWS_FULL
    assert refusal.message == text("refused.rows_full", "en", helper_id="new", max_rows=20)


def test_full_rows_evict_the_oldest_delivered_or_closed_row_without_a_goal() -> None:
    """R3: admission removes the oldest delivered or closed row without a Goal, and only as many as needed."""
    rows = [
        entry("old-goal", 1, RowState.DELIVERED, goal_id="weekly", at=T0 - timedelta(days=3)),
        entry("closed", 2, RowState.CLOSED, at=T0 - timedelta(hours=2)),
        entry("delivered", 3, RowState.DELIVERED, at=T0 - timedelta(hours=5)),
        entry("newer", 4, RowState.DELIVERED, at=T0 - timedelta(hours=1)),
        *unreported_rows(16, start=5),
    ]
    book = full_book(*rows)
    decision = admission.decide(book, request("new"))
    assert isinstance(decision, admission.Admit)
    assert decision.evict == ["delivered"]
    admission.take(book, request("new"), decision, T0, HARD_MS)
    assert "delivered" not in book.entries and "new" in book.entries
    assert len(book.entries) == 20


def test_goal_check_leaves_one_row_place() -> None:
    """R3, R30: a Goal check needs room for itself and one owner helper: it evicts two, or is refused."""
    rows = [
        entry("c1", 1, RowState.CLOSED, at=T0 - timedelta(hours=3)),
        entry("c2", 2, RowState.CLOSED, at=T0 - timedelta(hours=2)),
        *unreported_rows(18, start=3),
    ]
    book = full_book(*rows)
    decision = admission.decide(book, request("g1", goal_id="weekly"))
    assert isinstance(decision, admission.Admit) and decision.evict == ["c1", "c2"]
    admission.take(book, request("g1", goal_id="weekly"), decision, T0, HARD_MS)
    assert len(book.entries) == 19  # one place left for the owner


def test_goal_check_refused_when_it_would_take_the_last_row_place() -> None:
    """R3: 19 unevictable rows: an owner helper fits, a Goal check does not."""
    book = full_book(*unreported_rows(19))
    refusal = admission.decide(book, request("g1", goal_id="weekly"))
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.GOAL_NEEDS_ROW_PLACE
    assert refusal.message == text("refused.goal_needs_row_place", "en", helper_id="g1")
    decision = admission.decide(book, request("h1"))
    assert isinstance(decision, admission.Admit) and decision.evict == []


def test_rows_below_the_limit_evict_nothing() -> None:
    """R3: no eviction while there is room."""
    book = full_book(entry("d1", 1, RowState.DELIVERED), *unreported_rows(5, start=2))
    decision = admission.decide(book, request("h1"))
    assert isinstance(decision, admission.Admit) and decision.evict == []


def test_closed_rows_still_written_by_their_helper_are_not_evicted() -> None:
    """R3, R7: a running helper closed by its owner keeps its row (and slot) until its session stops."""
    closing = entry("closing", 1, RowState.CLOSED, helper_writes=True)
    closing.holds_slot = True
    book = full_book(closing, *unreported_rows(19, start=2))
    decision = admission.decide(book, request("h1"))
    assert isinstance(decision, Refusal) and decision.code is RefusalCode.ROWS_FULL


# --- admission bookkeeping (R4) -----------------------------------------------------------------


def test_admit_says_whether_it_runs_now_and_how_many_are_ahead() -> None:
    """R4, R6: the answer says runs-now or waits, and how many are ahead."""
    book = book_of(max_running=1, max_open=5)
    first = admission.decide(book, request("h1"))
    assert isinstance(first, admission.Admit) and first.ahead == 0 and first.seq == 1
    assert admit(book, "h1") == ["h1"]  # it runs now
    assert admit(book, "h2") == []
    third = admission.decide(book, request("h3"))
    assert isinstance(third, admission.Admit) and third.ahead == 1 and third.seq == 3
    assert admit(book, "h3") == [] and book.queue == ["h2", "h3"]


def test_undo_admission_forgets_the_helper() -> None:
    """R4: an admission whose row could not be written holds no place."""
    book = book_of(max_running=1)
    admit(book, "h1")
    admit(book, "h2")
    admission.undo(book, "h2", [])
    assert "h2" not in book.entries and book.queue == []
    admission.undo(book, "never", [])  # harmless


def test_undo_admission_puts_back_the_rows_it_would_have_evicted() -> None:
    """R3, R4: a failed admission removes nothing: the delivered row it evicted is back in the book."""
    book = book_of(max_rows=2, max_running=2)
    admit(book, "old")
    finish(book, "old")
    deliver(book, "old")
    admit(book, "keep")
    decision = admission.decide(book, request("new"))
    assert isinstance(decision, admission.Admit) and decision.evict == ["old"]
    evicted = [book.entries["old"]]
    admission.take(book, request("new"), decision, T0, 2_820_000)
    assert "old" not in book.entries
    admission.undo(book, "new", evicted)
    assert set(book.entries) == {"old", "keep"}


# --- slots (R6-R8) ----------------------------------------------------------------------------------


def test_slots_are_granted_in_admission_order_and_never_more_than_max_running() -> None:
    """R6, R8: at most max_running hold slots; a freed slot goes at once to the next in admission order."""
    book = book_of(max_open=5, max_running=2)
    assert admit(book, "h1") == ["h1"]
    assert admit(book, "h2") == ["h2"]
    assert admit(book, "h3") == []
    assert admit(book, "h4") == []
    assert book.slot_holders() == ["h1", "h2"] and book.queue == ["h3", "h4"]
    assert slots.grant(book, T0) == []
    assert finish(book, "h2") == ["h3"]
    assert book.entries["h3"].state is RowState.RUNNING and book.entries["h3"].holds_slot
    assert finish(book, "h1") == ["h4"]
    assert len(book.slot_holders()) == 2 and book.queue == []


def test_grant_sets_a_lease_beyond_the_hard_ceiling() -> None:
    """R7, R15: a slot is a lease that ends after the hard ceiling plus a margin, never before."""
    book = book_of()
    admit(book, "h1", now=T0)
    lease = T0 + timedelta(milliseconds=HARD_MS) + LEASE_MARGIN
    assert book.entries["h1"].lease_until == lease
    assert slots.expired_leases(book, lease - timedelta(seconds=1)) == []
    assert slots.expired_leases(book, lease) == ["h1"]
    assert slots.release(book, "h1")
    assert not slots.release(book, "h1"), "releasing twice does nothing"
    assert not slots.release(book, "unknown")
    assert book.slot_holders() == [] and book.entries["h1"].lease_until is None


def test_closed_running_helper_is_not_open_but_keeps_its_slot() -> None:
    """R2, R7, R21: closing a running helper frees its open place at once, its slot only at the session's end."""
    book = book_of()
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    assert closing.decide(book, "h1") is closing.CloseAction.FORWARD_TO_HELPER
    book.entries["h1"].state = RowState.CLOSED  # the helper's HELPER_CLOSED signal, as the coordinator applies it
    assert book.open_ids() == ["h2", "h3"]
    assert book.slot_holders() == ["h1", "h2", "h3"]
    decision = admission.decide(book, request("h4"))
    assert isinstance(decision, admission.Admit) and decision.ahead == 0
    assert admit(book, "h4") == []  # it waits: the closed helper still holds its slot
    assert finish(book, "h1", OutcomeKind.CLOSED) == ["h4"]
    assert book.entries["h1"].state is RowState.CLOSED and not book.entries["h1"].holds_slot


# --- a helper's end (R19, R26) ---------------------------------------------------------------------------


def test_finished_notice_hands_the_row_back_and_frees_the_slot() -> None:
    """R19, R26: a finalized outcome is unreported; the slot is freed; the coordinator now writes the row."""
    book = book_of()
    admit(book, "h1")
    notice = FinishedNotice(helper_id="h1", kind=OutcomeKind.PARTIAL, generation=4, finished_at=T0)
    e = slots.finished(book, notice)
    assert e is book.entries["h1"]
    assert (e.state, e.outcome_kind, e.generation, e.finished_at) == (RowState.UNREPORTED, OutcomeKind.PARTIAL, 4, T0)
    assert not e.helper_writes and not e.holds_slot and e.lease_until is None and e.keep_until is None


def test_closed_notice_starts_retention() -> None:
    """R29: a closed outcome is kept HELPER_KEEP_MS from its finish."""
    book = book_of()
    admit(book, "h1")
    e = slots.finished(book, FinishedNotice(helper_id="h1", kind=OutcomeKind.CLOSED, generation=3, finished_at=T0))
    assert e is not None and e.state is RowState.CLOSED and e.keep_until == T0 + KEEP


def test_repeated_finished_notice_changes_nothing() -> None:
    """R19: a finalized outcome never changes; a repeated notice is ignored."""
    book = book_of(max_running=1)
    admit(book, "h1")
    admit(book, "h2")
    finish(book, "h1")
    before = book.model_dump()
    for kind in OutcomeKind:
        notice = FinishedNotice(helper_id="h1", kind=kind, generation=99, finished_at=T0 + timedelta(hours=1))
        assert slots.finished(book, notice) is None
    assert slots.grant(book, T0) == []
    assert book.model_dump() == before
    unknown = FinishedNotice(helper_id="nobody", kind=OutcomeKind.FAILED, generation=1, finished_at=T0)
    assert slots.finished(book, unknown) is None


def test_notice_keeps_the_newer_generation() -> None:
    """R19: the coordinator never goes back to an older writer generation."""
    book = book_of()
    admit(book, "h1")
    book.entries["h1"].generation = 7
    slots.finished(book, FinishedNotice(helper_id="h1", kind=OutcomeKind.COMPLETED, generation=5, finished_at=T0))
    assert book.entries["h1"].generation == 7


def test_an_outcome_the_owner_can_read_is_not_open_while_its_helper_keeps_its_slot_to_find_a_lost_session() -> None:
    """R2, R38: a helper whose create was never answered writes its outcome and says so at once, holding its
    slot: it is no longer open (no refusal names it, its outcome can be read and delivered), but the slot waits
    until the lost session is found and stopped; the second notice frees it and passes it on."""
    book = book_of()
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    held = FinishedNotice(helper_id="h1", seq=1, kind=OutcomeKind.FAILED, generation=3, finished_at=T0, slot_held=True)
    e = slots.finished(book, held)
    assert e is not None and e.state is RowState.UNREPORTED and e.finding_lost_session
    assert book.open_ids() == ["h2", "h3"] and book.slot_holders() == ["h1", "h2", "h3"]
    decision = admission.decide(book, request("h4"))
    assert isinstance(decision, admission.Admit), "admitted"
    assert admit(book, "h4") == [], "and it waits for the slot"
    assert delivery.decide_read(book, ["h1"]) is None, "the outcome can be read"
    assert slots.finished(book, held) is None, "a repeat of the first notice changes nothing"
    assert slots.grant(book, T0) == []
    freed = held.model_copy(update={"slot_held": False})
    assert slots.finished(book, freed) is e
    assert not e.holds_slot and not e.finding_lost_session and e.lease_until is None
    assert slots.grant(book, T0) == ["h4"]
    assert slots.finished(book, freed) is None and slots.grant(book, T0) == []


def test_a_helper_that_keeps_its_slot_is_refused_by_nobody_and_its_refusals_name_only_open_helpers() -> None:
    """R2, R38: with three open helpers and one finished helper still holding its slot, the refusal of a fifth
    names the three open ones only: an outcome the owner can read never counts as open."""
    book = book_of(max_running=4)
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    slots.finished(
        book,
        FinishedNotice(helper_id="h1", seq=1, kind=OutcomeKind.FAILED, generation=3, finished_at=T0, slot_held=True),
    )
    admit(book, "h4")
    refusal = admission.decide(book, request("h5"))
    assert isinstance(refusal, Refusal) and refusal.open_ids == ["h2", "h3", "h4"]
    assert "h1" not in refusal.message


def test_a_lease_that_ends_frees_a_slot_kept_to_find_a_lost_session() -> None:
    """R7, R38: a helper that never sends its second notice loses its slot at its lease's end like any other."""
    book = book_of()
    admit(book, "h1")
    slots.finished(
        book,
        FinishedNotice(helper_id="h1", seq=1, kind=OutcomeKind.FAILED, generation=3, finished_at=T0, slot_held=True),
    )
    lease = book.entries["h1"].lease_until
    assert lease is not None and slots.expired_leases(book, lease) == ["h1"]
    assert slots.release(book, "h1") and not book.entries["h1"].finding_lost_session


def test_a_delivered_row_whose_helper_keeps_its_slot_is_closed_not_removed() -> None:
    """R23, R38: closing a delivered helper removes its row, except while its helper still holds the slot (the
    slot would leave with the row): then it is closed, and retention removes it once the slot is free."""
    row = entry("x", 1, RowState.DELIVERED).model_copy(update={"holds_slot": True, "finding_lost_session": True})
    assert closing.decide(full_book(row), "x") is closing.CloseAction.WRITE_CLOSED


def test_helper_closed_while_waiting_leaves_the_queue() -> None:
    """R6, R21: a waiting helper closed by its owner never takes a slot."""
    book = book_of(max_running=1)
    admit(book, "h1")
    admit(book, "h2")
    admit(book, "h3")
    assert closing.decide(book, "h2") is closing.CloseAction.FORWARD_TO_HELPER
    slots.finished(book, FinishedNotice(helper_id="h2", kind=OutcomeKind.CLOSED, generation=2, finished_at=T0))
    assert book.queue == ["h3"]
    assert finish(book, "h1") == ["h3"]


# --- close (R21-R23) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (entry("x", 1, RowState.WAITING), closing.CloseAction.FORWARD_TO_HELPER),
        (entry("x", 1, RowState.RUNNING), closing.CloseAction.FORWARD_TO_HELPER),
        (entry("x", 1, RowState.CLOSED, helper_writes=True), closing.CloseAction.FORWARD_TO_HELPER),
        (entry("x", 1, RowState.UNREPORTED), closing.CloseAction.WRITE_CLOSED),
        (entry("x", 1, RowState.UNREPORTED, goal_id="weekly"), closing.CloseAction.WRITE_CLOSED),
        (entry("x", 1, RowState.DELIVERED), closing.CloseAction.REMOVE),
        (entry("x", 1, RowState.DELIVERED, goal_id="weekly"), closing.CloseAction.WRITE_CLOSED),
        (entry("x", 1, RowState.CLOSED), closing.CloseAction.NOTHING),
        (entry("x", 1, RowState.CLOSED, goal_id="weekly"), closing.CloseAction.NOTHING),
    ],
    ids=lambda v: (
        v.value if isinstance(v, closing.CloseAction) else f"{v.state.value}-goal={v.goal_id}-writes={v.helper_writes}"
    ),
)
def test_decide_close_for_each_state(row: Entry, expected: closing.CloseAction) -> None:
    """R21-R23: forward while the helper writes; withdraw unreported; remove delivered (Goal rows are kept)."""
    assert closing.decide(full_book(row.model_copy()), "x") is expected


def test_close_unknown_helper_is_refused() -> None:
    """R34: closing a helper the owner does not have is refused."""
    refusal = closing.decide(book_of(), "nobody")
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.UNKNOWN_HELPER
    assert "nobody" in refusal.message


def test_closing_an_unreported_outcome_withdraws_its_report() -> None:
    """R22, R29: the row is closed at a newer generation, kept from its finish, unread and unannounced."""
    book = book_of()
    admit(book, "h1")
    admit(book, "h2")
    finish(book, "h1")
    finish(book, "h2")
    event = outbox.next_event(book)
    assert event is not None and event.helper_ids == ["h1", "h2"]
    delivery.read(book, "turn-1", ["h1", "h2"])
    generation = book.entries["h1"].generation
    e = closing.close_row(book, "h1")
    assert e.state is RowState.CLOSED and e.generation == generation + 1 and e.keep_until == T0 + KEEP
    assert book.turn_reads["turn-1"] == ["h2"]
    assert book.event is not None and book.event.helper_ids == ["h2"]
    assert [d.helper_id for d in delivery.deliver(book, "turn-1", T0)] == ["h2"]
    assert closing.decide(book, "h1") is closing.CloseAction.NOTHING


def test_withdrawing_the_last_outcome_drops_the_event() -> None:
    """R22: an event left with nothing to say is not offered."""
    book = book_of()
    admit(book, "h1")
    finish(book, "h1")
    assert outbox.next_event(book) is not None
    event = outbox.next_event(book)
    assert event is not None
    closing.close_row(book, "h1")
    assert book.event is None
    assert outbox.next_event(book) is None
    assert outbox.take_withdrawn(book) == [event.key] and outbox.take_withdrawn(book) == [], "the store is told once"


def test_withdraw_leaves_a_delivered_event_alone() -> None:
    """R26: an event the chat already received is history; it is not edited."""
    book = book_of()
    admit(book, "h1")
    finish(book, "h1")
    outbox.next_event(book)
    outbox.delivered(book, "receipt-1")
    deliver(book, "h1")
    outbox.withdraw_settled(book)
    assert book.event is not None and book.event.helper_ids == ["h1"] and book.withdrawn == []


def test_an_event_whose_outcomes_were_all_read_and_delivered_is_withdrawn() -> None:
    """R26, R28: the chat was down, so the event for two outcomes waits; a turn reads and delivers one of them: the
    event now announces only the other; once that one is delivered too, the event is withdrawn (never offered
    again), and the next outcome gets an event of its own at once."""
    book = book_of(max_running=3)
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    finish(book, "h1")
    finish(book, "h2")
    event = outbox.next_event(book)
    assert event is not None and event.helper_ids == ["h1", "h2"]
    deliver(book, "h1")
    assert book.event is event and event.helper_ids == ["h2"]
    deliver(book, "h2")
    assert book.event is None and book.withdrawn == [event.key]
    finish(book, "h3")
    fresh = outbox.next_event(book)
    assert fresh is not None and fresh.key != event.key and fresh.helper_ids == ["h3"]


def test_a_follow_up_takes_its_earlier_outcome_out_of_the_event() -> None:
    """R26: a follow-up delivers the outcome it continues; the event announcing only that outcome is withdrawn."""
    book = book_of()
    admit(book, "h1")
    finish(book, "h1", OutcomeKind.QUESTION)
    event = outbox.next_event(book)
    assert event is not None
    follow_up = HelperRequest(owner="anna", helper_id="h2", task="yes", model="m", follow_up="h1")
    decision = admission.decide(book, follow_up)
    assert isinstance(decision, admission.Admit)
    admission.take(book, follow_up, decision, T0, HARD_MS)
    assert book.entries["h1"].state is RowState.DELIVERED
    assert book.event is None and book.withdrawn == [event.key]


def test_an_offer_answered_after_its_event_was_withdrawn_is_not_retried() -> None:
    """R26: the chat was down while the turn delivered the outcome; the offer under way then fails: the event is
    not offered again. Had the chat taken it after all, the store keeps its receipt rather than "withdrawn"."""
    for state, receipt, still_withdrawn in ((EventState.FAILED, None, True), (EventState.DELIVERED, "r-1", False)):
        book = book_of()
        admit(book, "h1")
        finish(book, "h1")
        event = outbox.next_event(book)
        assert event is not None
        deliver(book, "h1")
        outcome = outbox.record_offer(book, event, state, receipt, "down", T0, timedelta(hours=1))
        assert outcome is outbox.OfferOutcome.WITHDRAWN
        assert book.event is None and outbox.next_event(book) is None
        assert (book.withdrawn == [event.key]) is still_withdrawn


def test_closing_a_delivered_helper_without_goal_removes_it() -> None:
    """R23, R21: the coordinator removes the row at once; closing it again is harmless (a repeat of the
    same request), while an id the owner never had is refused."""
    book = book_of()
    admit(book, "h1")
    finish(book, "h1")
    deliver(book, "h1")
    assert closing.decide(book, "h1") is closing.CloseAction.REMOVE
    closing.closed_for_removal(book, "h1")  # as the coordinator does once the row is removed
    retention.forget(book, ["h1"])
    assert "h1" not in book.entries
    assert closing.decide(book, "h1") is closing.CloseAction.ALREADY_REMOVED
    assert isinstance(closing.decide(book, "never-was"), Refusal)


def test_a_row_removed_without_the_owners_close_is_no_helper_to_close() -> None:
    """R23, R29: a delivered row that expired, or one evicted for room, is gone as `show` says (404): closing it is
    unknown_helper, not "already closed"; a closed row that expired stays harmless to close again."""
    book = book_of()
    for helper_id in ("delivered", "closed"):
        admit(book, helper_id)
        finish(book, helper_id)
    deliver(book, "delivered")
    book.entries["closed"].state = RowState.CLOSED
    retention.forget(book, ["delivered", "closed"])
    refusal = closing.decide(book, "delivered")
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.UNKNOWN_HELPER
    assert closing.decide(book, "closed") is closing.CloseAction.ALREADY_REMOVED


# --- reading and delivery (R27, R28) ---------------------------------------------------------------


def test_decide_read_accepts_only_unreported_outcomes() -> None:
    """R27, R28: only unreported outcomes can be read; unknown and others are refused."""
    book = full_book(
        entry("u", 1, RowState.UNREPORTED),
        entry("r", 2, RowState.RUNNING),
        entry("d", 3, RowState.DELIVERED),
    )
    book.entries["r"].language = "ru"
    assert delivery.decide_read(book, ["u"]) is None
    assert delivery.decide_read(book, []) is None
    unknown = delivery.decide_read(book, ["u", "nobody"])
    assert isinstance(unknown, Refusal) and unknown.code is RefusalCode.UNKNOWN_HELPER
    running = delivery.decide_read(book, ["r"])
    assert isinstance(running, Refusal) and running.code is RefusalCode.NOT_UNREPORTED
    assert running.message == text("refused.not_unreported", "ru", helper_id="r")
    delivered = delivery.decide_read(book, ["d"])
    assert isinstance(delivered, Refusal) and delivered.code is RefusalCode.NOT_UNREPORTED


def test_only_what_the_turn_read_is_delivered() -> None:
    """R28: delivery marks exactly what that turn read, and only outcomes still unreported."""
    book = full_book(*unreported_rows(4))
    assert delivery.read(book, "turn-a", ["u1", "u2"]) == ["u1", "u2"]
    assert delivery.read(book, "turn-a", ["u2", "u3"]) == ["u1", "u2", "u3"]
    assert delivery.read(book, "turn-b", ["u4"]) == ["u4"]
    closing.close_row(book, "u3")  # closed after it was read: not delivered
    book.turn_reads["turn-a"].append("u3")  # even if it were still listed
    later = T0 + timedelta(minutes=3)
    delivered = delivery.deliver(book, "turn-a", later)
    assert [e.helper_id for e in delivered] == ["u1", "u2"]
    for e in delivered:
        assert e.state is RowState.DELIVERED and e.delivered_at == later and e.keep_until == later + KEEP
        assert e.generation == 2
    assert book.entries["u3"].state is RowState.CLOSED
    assert book.entries["u4"].state is RowState.UNREPORTED
    assert book.turn_reads == {"turn-b": ["u4"]}
    assert delivery.deliver(book, "turn-a", later) == [], "a repeated delivery changes nothing"


def test_an_outcome_read_but_not_answered_is_read_again() -> None:
    """R28: a turn that read but never answered delivers nothing; the next turn may read it again."""
    book = full_book(*unreported_rows(1))
    delivery.read(book, "turn-crashed", ["u1"])
    assert book.entries["u1"].state is RowState.UNREPORTED
    assert delivery.decide_read(book, ["u1"]) is None
    delivery.read(book, "turn-2", ["u1"])
    assert [e.helper_id for e in delivery.deliver(book, "turn-2", T0)] == ["u1"]
    assert delivery.deliver(book, "turn-crashed", T0) == []


def test_unknown_turn_delivers_nothing() -> None:
    """R28: nothing is delivered without a read."""
    book = full_book(*unreported_rows(2))
    assert delivery.deliver(book, "never-read", T0) == []
    assert all(e.state is RowState.UNREPORTED for e in book.entries.values())


def test_delivering_one_outcome_is_the_same_for_a_turn_and_an_answer() -> None:
    """R26, R28, R29, R49: a turn's delivery, an owner's answer and a follow-up all deliver through one step: an
    unreported outcome becomes delivered, is kept from now and leaves the event; any other row is left alone."""
    book = book_of()
    admit(book, "h1")
    admit(book, "h2")
    finish(book, "h1", OutcomeKind.QUESTION)
    finish(book, "h2", OutcomeKind.CLOSED)
    event = outbox.next_event(book)
    assert event is not None and event.helper_ids == ["h1"]
    h1, h2 = book.entries["h1"], book.entries["h2"]
    generation, closed_keep = h1.generation, h2.keep_until
    assert delivery.deliver_one(book, h1, ANSWERED_AT)
    assert h1.state is RowState.DELIVERED and h1.delivered_at == ANSWERED_AT and h1.keep_until == ANSWERED_AT + KEEP
    assert h1.generation == generation, "the caller sets the generation its write carries"
    assert book.event is None and book.withdrawn == [event.key]
    assert not delivery.deliver_one(book, h1, ANSWERED_AT + KEEP), "delivered once"
    assert h1.delivered_at == ANSWERED_AT
    assert not delivery.deliver_one(book, h2, ANSWERED_AT)
    assert h2.state is RowState.CLOSED and h2.delivered_at is None and h2.keep_until == closed_keep


def test_removed_entries_leave_the_turn_reads() -> None:
    """R28, R29: a removed row is not delivered later."""
    book = full_book(*unreported_rows(2))
    delivery.read(book, "turn", ["u1", "u2"])
    retention.forget(book, ["u1", "absent"])
    assert book.turn_reads == {"turn": ["u2"]}


# --- retention (R29) ------------------------------------------------------------------------------------


def test_closed_rows_expire_keep_ms_after_their_finish_and_delivered_after_delivery() -> None:
    """R29: closed rows from their finish, delivered rows from delivery; never before."""
    book = book_of()
    admit(book, "closed", now=T0)
    admit(book, "delivered", now=T0)
    admit(book, "unreported", now=T0)
    finish(book, "closed", OutcomeKind.CLOSED, now=T0)
    finish(book, "delivered", now=T0)
    finish(book, "unreported", now=T0)
    delivered_at = T0 + timedelta(hours=5)
    deliver(book, "delivered", now=delivered_at)
    assert retention.expired(book, T0 + KEEP - timedelta(seconds=1)) == []
    assert retention.expired(book, T0 + KEEP) == ["closed"]
    assert retention.expired(book, delivered_at + KEEP) == ["closed", "delivered"]
    assert "unreported" not in retention.expired(book, T0 + 100 * KEEP)


def test_each_row_is_kept_from_its_own_moment() -> None:
    """R29: a closed row from its finish (its admission if it never finished), a delivered row from its delivery, a
    gone helper's from when the book learns it; the helper keeps a row it closes itself by the same rule."""
    book = book_of()
    closed = entry("closed", 1, RowState.CLOSED)
    retention.keep_closed(book, closed)
    assert closed.finished_at == T0 and closed.keep_until == T0 + KEEP
    never_finished = entry("never-finished", 2, RowState.CLOSED, helper_writes=True)
    retention.keep_closed(book, never_finished)
    assert never_finished.finished_at is None and never_finished.keep_until == T0 - timedelta(hours=1) + KEEP
    delivered = entry("delivered", 3, RowState.DELIVERED)
    retention.keep_from(book, delivered, T0 + timedelta(hours=5))
    assert delivered.keep_until == T0 + timedelta(hours=5) + KEEP
    gone = entry("gone", 4, RowState.CLOSED)
    retention.keep_from(book, gone, T0 + timedelta(days=2))
    assert gone.keep_until == T0 + timedelta(days=2) + KEEP  # not from its finish, two days before
    assert retention.kept_until(T0, book.policy.keep_ms) == T0 + KEEP


def test_removable_rows_are_the_ones_expiry_and_eviction_may_take() -> None:
    """R3, R29, R30, R54: only a delivered, closed or expired row the coordinator writes and that holds no slot may
    go; eviction takes such a row only without a Goal, expiry with one too."""
    for state in RowState:
        row = entry("r", 1, state, helper_writes=False)
        row.holds_slot = False
        assert retention.removable(row) is (state in (RowState.DELIVERED, RowState.CLOSED, RowState.EXPIRED)), state
    delivered = entry("d", 1, RowState.DELIVERED)
    goal = entry("g", 2, RowState.CLOSED, goal_id="weekly")
    written = entry("w", 3, RowState.CLOSED, helper_writes=True)
    holder = entry("s", 4, RowState.CLOSED)
    holder.holds_slot = True
    assert [retention.removable(e) for e in (delivered, goal, written, holder)] == [True, True, False, False]
    assert [retention.evictable(e) for e in (delivered, goal, written, holder)] == [True, False, False, False]
    for row in (delivered, goal, written, holder):
        row.keep_until = T0
    book = full_book(delivered, goal, written, holder)
    assert retention.expired(book, T0) == ["d", "g"]
    assert admission.rows_to_evict(book, room_needed=book.policy.max_rows - 3) == ["d"]  # one row to free


def test_rows_still_written_or_holding_a_slot_never_expire() -> None:
    """R7, R29: a closed row whose helper still runs is not removed under it."""
    closing = entry("closing", 1, RowState.CLOSED, helper_writes=True)
    closing.holds_slot = True
    closing.keep_until = T0
    holder = entry("holder", 2, RowState.CLOSED)
    holder.holds_slot = True
    holder.keep_until = T0
    book = full_book(closing, holder)
    assert retention.expired(book, T0 + 100 * KEEP) == []


def test_next_wakeup_is_the_earliest_expiry_or_lease_end() -> None:
    """R8, R29: one timer for the earliest retention expiry or lease end; none when nothing is due."""
    book = book_of()
    assert retention.next_wakeup(book) is None
    admit(book, "h1", now=T0)
    lease = T0 + timedelta(milliseconds=HARD_MS) + LEASE_MARGIN
    assert retention.next_wakeup(book) == lease
    finish(book, "h1", OutcomeKind.CLOSED, now=T0 + timedelta(minutes=1))
    assert retention.next_wakeup(book) == T0 + timedelta(minutes=1) + KEEP
    admit(book, "h2", now=T0 + timedelta(minutes=2))
    assert retention.next_wakeup(book) == T0 + timedelta(minutes=2) + timedelta(milliseconds=HARD_MS) + LEASE_MARGIN


def test_the_timer_is_armed_again_only_for_an_earlier_moment() -> None:
    """R8, R29: a lease that ends (every helper) makes the next moment later; the armed timer is kept and
    fires early, once, instead of being cancelled and started again. An earlier moment re-arms it."""
    book = book_of()
    admit(book, "h1", now=T0)
    armed = retention.next_wakeup(book)
    assert retention.timer_outdated(armed, None)  # nothing armed yet
    finish(book, "h1", OutcomeKind.COMPLETED, now=T0 + timedelta(minutes=1))
    assert retention.next_wakeup(book) is None and not retention.timer_outdated(retention.next_wakeup(book), armed)
    admit(book, "h2", now=T0 + timedelta(minutes=2))
    assert retention.next_wakeup(book) > armed and not retention.timer_outdated(retention.next_wakeup(book), armed)  # type: ignore[operator]
    finish(book, "h2", OutcomeKind.CLOSED, now=T0 + timedelta(minutes=3))
    assert retention.next_wakeup(book) == T0 + timedelta(minutes=3) + KEEP
    assert retention.timer_outdated(T0, armed) and not retention.timer_outdated(armed, armed)


def test_next_wakeup_ignores_rows_the_helper_still_writes() -> None:
    """R29: a helper's own row is not expired by the coordinator."""
    row = entry("x", 1, RowState.CLOSED, helper_writes=True)
    row.keep_until = T0
    assert retention.next_wakeup(full_book(row)) is None


# --- the chat outbox (R26) ---------------------------------------------------------------------------


def test_one_event_for_every_unannounced_outcome() -> None:
    """R26: one event carries several outcomes, with a key that makes a repeat harmless."""
    book = book_of()
    assert outbox.next_event(book) is None
    for helper_id in ("h1", "h2", "h3"):
        admit(book, helper_id)
    finish(book, "h2")
    finish(book, "h1")
    event = outbox.next_event(book)
    assert event is not None
    assert event.key == "helpers-ready:anna:1" and event.helper_ids == ["h1", "h2"]
    assert event.state is EventState.PENDING and event.attempts == 0
    finish(book, "h3")
    assert outbox.next_event(book) is event, "the event in flight is offered again, unchanged"
    assert event.helper_ids == ["h1", "h2"]
    outbox.delivered(book, "receipt-9")
    delivered = book.event
    assert delivered is event and delivered.state is EventState.DELIVERED and delivered.receipt_id == "receipt-9"
    assert book.entries["h1"].announced and book.entries["h2"].announced
    second = outbox.next_event(book)
    assert second is not None and second.key == "helpers-ready:anna:2" and second.helper_ids == ["h3"]
    outbox.delivered(book, "receipt-10")
    assert outbox.next_event(book) is None


def test_apply_event_delivered_without_event_is_harmless() -> None:
    """R26: a late receipt with nothing in flight changes nothing."""
    book = book_of()
    before = book.model_dump()
    outbox.delivered(book, "receipt")
    assert book.model_dump() == before


def test_summarize_book_counts() -> None:
    """Counts for logs and the Web UI."""
    book = book_of(max_running=1)
    admit(book, "h1")
    admit(book, "h2")
    admit(book, "h3")
    finish(book, "h1")
    summary = summarize_book(book)
    assert (summary.open, summary.running, summary.waiting, summary.rows, summary.unreported) == (2, 1, 1, 3, 1)


# --- answers to questions and authorization waits (R49) -------------------------------------------------------


def asked_book(
    kind: OutcomeKind = OutcomeKind.QUESTION,
    *,
    choices: QuestionChoices | None = VENUE,
    action: str | None = "send_mail to bob@example.com",
    boundary: tuple[str, ...] = (),
    **policy: int,
) -> OwnerBook:
    """A book whose helper h1 finished with `kind`, its notice saying what it takes as an answer."""
    book = book_of(**policy)
    admit(book, "h1")
    asked = answering.asked_of(kind, choices=choices, authorization_action=action, model="m-1", boundary=boundary)
    notice = FinishedNotice(helper_id="h1", kind=kind, generation=3, finished_at=T0, asked=asked)
    assert slots.finished(book, notice)
    return book


def take(book: OwnerBook, answer: OwnerAnswer, helper_id: str = "h1") -> HelperRequest | None:
    """A first valid answer as the coordinator takes it: judged, recorded, and its follow-up admitted."""
    judged = answering.judge(book, book.owner, helper_id, answer, arrived_at=ANSWERED_AT)
    assert isinstance(judged, answering.TakeAnswer), judged
    answering.record(book, helper_id, answer)
    if judged.follow_up is not None and judged.admission is not None:
        admission.take(book, judged.follow_up, judged.admission, T0, HARD_MS)
    return judged.follow_up


def test_an_answer_whose_follow_up_needs_room_names_the_rows_it_evicts() -> None:
    """R3, R49: the follow-up is admitted by the admission rules: with every row taken, it evicts the oldest
    delivered one, and the judgement says which, for the answer's reply."""
    book = asked_book(max_rows=2)
    admit(book, "old")
    finish(book, "old")
    deliver(book, "old")
    judged = answering.judge(book, book.owner, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(judged, answering.TakeAnswer) and judged.admission is not None
    assert judged.admission.evict == ["old"]


def test_an_answer_whose_follow_up_would_be_refused_is_refused_and_not_recorded() -> None:
    """R2, R49: with the owner's open places taken, the follow-up is refused, so the answer is, and the owner
    can answer again once a place is free."""
    book = asked_book(max_open=2)
    admit(book, "busy-1")
    admit(book, "busy-2")
    judged = answering.judge(book, book.owner, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.TOO_MANY_OPEN
    assert book.entries["h1"].answer is None
    finish(book, "busy-1")
    assert isinstance(answering.judge(book, book.owner, "h1", WALK, arrived_at=ANSWERED_AT), answering.TakeAnswer)


def test_a_question_with_choices_takes_one_of_its_options_and_its_follow_up_carries_the_choice() -> None:
    """R49: the first valid answer admits the follow-up, derived from the question's helper, on its model."""
    book = asked_book(boundary=("send_mail to anna@example.com",))
    follow = take(book, WALK)
    assert follow is not None
    assert follow.helper_id == answering.answer_helper_id("h1") == "h1.answer"
    assert follow.follow_up == "h1" and follow.model == "m-1" and follow.language == "en"
    assert follow.boundary == ("send_mail to anna@example.com",)
    assert "Walking distance" in follow.task and "venue" in follow.task
    question = book.entries["h1"]
    assert question.answer == WALK and question.followed_up_by == "h1.answer"
    assert question.state is RowState.DELIVERED  # the answer is the owner's reply to it
    assert book.entries["h1.answer"].follow_up_of == "h1"


def test_a_later_answer_gets_the_first_back_and_says_whether_it_is_the_same() -> None:
    """R49: any later answer, the same or another, is told the first and starts nothing."""
    book = asked_book()
    take(book, WALK)
    again = answering.decide(book, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(again, answering.Repeated) and again.same
    other = answering.decide(book, "h1", OwnerAnswer(question_id="venue", option_id="taxi"), arrived_at=ANSWERED_AT)
    assert isinstance(other, answering.Repeated) and not other.same
    assert other.entry.answer == WALK


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (OwnerAnswer(question_id="date", option_id="walk"), RefusalCode.STALE_QUESTION),
        (OwnerAnswer(question_id="venue", option_id="bike"), RefusalCode.NOT_OFFERED),
        (OwnerAnswer(question_id="venue", text="somewhere quiet"), RefusalCode.NOT_OFFERED),
    ],
)
def test_an_answer_to_another_question_or_not_offered_is_refused_and_nothing_is_recorded(
    answer: OwnerAnswer, code: RefusalCode
) -> None:
    book = asked_book()
    refusal = answering.decide(book, "h1", answer, arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is code
    assert book.entries["h1"].answer is None


def test_what_the_question_never_took_is_refused_even_after_it_was_answered() -> None:
    book = asked_book()
    take(book, WALK)
    stale = answering.decide(book, "h1", OwnerAnswer(question_id="date", option_id="walk"), arrived_at=ANSWERED_AT)
    assert isinstance(stale, Refusal) and stale.code is RefusalCode.STALE_QUESTION
    not_offered = answering.decide(
        book, "h1", OwnerAnswer(question_id="venue", option_id="bike"), arrived_at=ANSWERED_AT
    )
    assert isinstance(not_offered, Refusal) and not_offered.code is RefusalCode.NOT_OFFERED


def test_an_answer_that_came_before_the_question_is_not_answerable_however_right() -> None:
    """R49: the coordinator took the answer in while the helper still worked; the helper then asked exactly that
    question. Nobody could have seen it, so the guess is refused and the question still waits for its answer."""
    book = asked_book()
    asked_at = book.entries["h1"].finished_at
    assert asked_at is not None
    early = answering.decide(book, "h1", WALK, arrived_at=asked_at - timedelta(milliseconds=1))
    assert isinstance(early, Refusal) and early.code is RefusalCode.NOT_ANSWERABLE
    assert early.message == text("refused.answer_before_asked", "en", helper_id="h1")
    assert book.entries["h1"].answer is None
    assert answering.decide(book, "h1", WALK, arrived_at=asked_at) is None


def test_another_question_after_the_answer_says_the_question_was_answered() -> None:
    book = asked_book()
    take(book, WALK)
    stale = answering.decide(book, "h1", OwnerAnswer(question_id="date", option_id="walk"), arrived_at=ANSWERED_AT)
    assert isinstance(stale, Refusal)
    assert stale.message == text(
        "refused.answer_stale_answered", "en", helper_id="h1", question_id="date", asked="venue"
    )


def test_an_unknown_helper_a_running_one_and_an_outcome_that_waits_for_nobody_are_refused() -> None:
    book = asked_book()
    assert answering.decide(book, "nobody", WALK, arrived_at=ANSWERED_AT) == Refusal(
        code=RefusalCode.UNKNOWN_HELPER, message=text("refused.unknown_helper", "en", helper_id="nobody")
    )
    admit(book, "h2")
    running = answering.decide(book, "h2", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(running, Refusal) and running.code is RefusalCode.NOT_ANSWERABLE
    finish(book, "h2")  # completed: nothing asked
    completed = answering.decide(book, "h2", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(completed, Refusal) and completed.code is RefusalCode.NOT_ANSWERABLE


def test_a_closed_question_or_one_followed_up_by_hand_takes_no_answer() -> None:
    book = asked_book()
    follow_up = HelperRequest(owner="anna", helper_id="h2", task="walk", model="m", follow_up="h1")
    decision = admission.decide(book, follow_up)
    assert isinstance(decision, admission.Admit)
    admission.take(book, follow_up, decision, T0, HARD_MS)
    refusal = answering.decide(book, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.NOT_ANSWERABLE
    assert "h2" in refusal.message
    closed = asked_book()
    closing.close_row(closed, "h1")
    refusal = answering.decide(closed, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.NOT_ANSWERABLE


def test_a_plain_text_question_takes_free_text_under_the_id_question() -> None:
    book = asked_book(choices=None)
    assert book.entries["h1"].asked is not None and book.entries["h1"].asked.question_id == PLAIN_QUESTION_ID
    option = answering.decide(
        book, "h1", OwnerAnswer(question_id=PLAIN_QUESTION_ID, option_id="walk"), arrived_at=ANSWERED_AT
    )
    assert isinstance(option, Refusal) and option.code is RefusalCode.NOT_OFFERED
    follow = take(book, OwnerAnswer(question_id=PLAIN_QUESTION_ID, text="Friday at seven"))
    assert follow is not None and "Friday at seven" in follow.task


def test_the_follow_up_task_is_in_the_owner_language() -> None:
    """R32: the follow-up's task, like the refusals, is in the owner's language."""
    book = book_of()
    ru = request("h1", language="ru")
    decision = admission.decide(book, ru)
    assert isinstance(decision, admission.Admit)
    admission.take(book, ru, decision, T0, HARD_MS)
    slots.grant(book, T0)
    asked = answering.asked_of(OutcomeKind.QUESTION, choices=VENUE, authorization_action=None, model="m", boundary=())
    slots.finished(
        book, FinishedNotice(helper_id="h1", kind=OutcomeKind.QUESTION, generation=3, finished_at=T0, asked=asked)
    )
    follow = take(book, WALK)
    assert follow is not None and follow.language == "ru" and "Владелец ответил" in follow.task
    refusal = answering.decide(book, "h1", OwnerAnswer(question_id="date", option_id="walk"), arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and "не задавал" in refusal.message


def test_an_answer_whose_follow_up_is_refused_is_not_recorded_and_can_be_given_again() -> None:
    """R2, R49: with every open place taken the answer is refused; once a place frees, the same answer is taken."""
    book = asked_book(max_open=2)
    admit(book, "h2")
    admit(book, "h3")
    follow = answering.follow_up_request(book, book.entries["h1"], WALK)
    assert follow is not None
    refusal = admission.decide(book, follow)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.TOO_MANY_OPEN
    assert book.entries["h1"].answer is None
    finish(book, "h2")
    assert take(book, WALK) is not None


def test_withdrawing_an_answer_whose_follow_up_was_not_written_lets_it_be_given_again() -> None:
    book = asked_book()
    decision = answering.decide(book, "h1", WALK, arrived_at=ANSWERED_AT)
    assert decision is None
    answering.record(book, "h1", WALK)
    answering.withdraw(book, "h1")
    assert (
        answering.decide(book, "h1", OwnerAnswer(question_id="venue", option_id="taxi"), arrived_at=ANSWERED_AT) is None
    )


def test_a_grant_admits_the_follow_up_with_the_item_asked_for_granted_beside_the_boundary() -> None:
    """R41, R49, R55: the granted item is a boundary item, carried as the follow-up's grant; the boundary stays."""
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, boundary=("send_mail to anna@example.com",))
    grant = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.GRANT)
    follow = take(book, grant)
    assert follow is not None
    assert follow.boundary == ("send_mail to anna@example.com",)
    bob = "send_mail to bob@example.com"
    assert follow.granted_action == GrantedAction(action=bob, asked=bob)
    assert "send_mail to bob@example.com" in follow.task
    again = answering.decide(
        book,
        "h1",
        OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.DENY),
        arrived_at=ANSWERED_AT,
    )
    assert isinstance(again, answering.Repeated) and not again.same


TWO = "send_mail to anna@example.com, bob@example.com"


def narrowed(action: str) -> OwnerAnswer:
    return OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.GRANT, text=action)


def test_a_grant_may_narrow_the_action_to_some_of_its_recipients() -> None:
    """R55: the follow-up gets the narrowed action, in the grammar's spelling, and the record keeps both."""
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, action=TWO)
    follow = take(book, narrowed("Send mail to ANNA@example.com"))
    assert follow is not None
    assert follow.boundary == () and follow.granted_action == GrantedAction(
        action="send_mail to anna@example.com", asked=TWO
    )
    assert "send_mail to anna@example.com" in follow.task and "bob@" not in follow.task
    end = audit.answered(book.entries["h1"], ANSWERED_AT, None, follow.helper_id)
    assert (end.asked_grant, end.granted, end.ended) == (TWO, "send_mail to anna@example.com", WaitEndKind.GRANTED)


@pytest.mark.parametrize(
    ("edit", "wider"),
    [
        ("send_mail to anna@example.com, carol@example.com", "send_mail to carol@example.com"),
        ("send_mail to carol@example.com", "send_mail to carol@example.com"),
        ("create_event with anna@example.com", "create_event with anna@example.com"),
    ],
)
def test_a_grant_that_widens_the_action_is_refused_naming_what_widens_it(edit: str, wider: str) -> None:
    """R55: an added recipient or another tool is refused, nothing is recorded, and the wait still takes an answer."""
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, action=TWO)
    refusal = answering.judge(book, book.owner, "h1", narrowed(edit), arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.GRANT_WIDENS
    assert wider in refusal.message and TWO in refusal.message
    assert book.entries["h1"].answer is None
    assert take(book, narrowed("send_mail to bob@example.com")) is not None


def test_the_narrowed_grant_is_the_one_answer_and_a_later_grant_gets_it_back() -> None:
    """R49, R55: a plain grant or another edit after a narrowed grant is answered with it, repeated, not the same."""
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, action=TWO)
    first = narrowed("send_mail to anna@example.com")
    take(book, first)
    for later in (OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.GRANT), narrowed(TWO)):
        again = answering.decide(book, "h1", later, arrived_at=ANSWERED_AT)
        assert isinstance(again, answering.Repeated) and not again.same and again.entry.answer == first
    same = answering.decide(book, "h1", first, arrived_at=ANSWERED_AT)
    assert isinstance(same, answering.Repeated) and same.same


def test_a_deny_takes_no_action_and_a_question_takes_no_option_with_words() -> None:
    """Only a grant names both an option and a text: anything else breaks the answer's own bounds, refused as the
    coordinator judges it (and the starter, before sending), and nothing is recorded."""
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, action=TWO)
    deny = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.DENY, text=TWO)
    refusal = answering.judge(book, book.owner, "h1", deny, arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.INVALID_REQUEST
    assert book.entries["h1"].answer is None
    both = OwnerAnswer(question_id="venue", option_id="walk", text="send_mail to anna@example.com")
    assert answering.answer_problems(both) != []


def test_a_deny_starts_nothing_and_delivers_the_outcome() -> None:
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None)
    deny = OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.DENY)
    assert answering.decide(book, "h1", deny, arrived_at=ANSWERED_AT) is None
    entry = book.entries["h1"]
    assert answering.follow_up_request(book, entry, deny) is None
    answering.record(book, "h1", deny)
    generation = entry.generation
    assert answering.deny(book, entry, T0)
    assert entry.state is RowState.DELIVERED and entry.generation == generation + 1
    assert not answering.deny(book, entry, T0)  # delivered already: nothing to write
    assert list(book.entries) == ["h1"]


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("send mail to everyone", "does not parse"),
        ("never send mail to bob@example.com", ""),
        (None, "named no action"),
        ("send_mail to " + "b" * 200 + "@example.com", "more than 200"),
    ],
)
def test_a_grant_whose_item_does_not_parse_is_refused(action: str | None, why: str) -> None:
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None, action=action)
    refusal = answering.decide(
        book,
        "h1",
        OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.GRANT),
        arrived_at=ANSWERED_AT,
    )
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.GRANT_REFUSED
    assert why in refusal.message
    # deny is still possible
    assert (
        answering.decide(
            book,
            "h1",
            OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id=answering.DENY),
            arrived_at=ANSWERED_AT,
        )
        is None
    )


def test_an_authorization_takes_only_grant_or_deny() -> None:
    book = asked_book(OutcomeKind.AUTHORIZATION, choices=None)
    for answer in (
        OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id="yes"),
        OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, text="yes please"),
    ):
        refusal = answering.decide(book, "h1", answer, arrived_at=ANSWERED_AT)
        assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.NOT_OFFERED


def test_a_helper_id_taken_by_another_helper_refuses_the_answer() -> None:
    book = asked_book()
    admit(book, "h1.answer")
    refusal = answering.decide(book, "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.NOT_ANSWERABLE


@pytest.mark.parametrize("helper_id", ["h", "a" * 57, "a" * 58, "b" * 64])
def test_the_follow_up_id_is_a_valid_helper_id_derived_from_the_question(helper_id: str) -> None:
    derived = answering.answer_helper_id(helper_id)
    assert len(derived) <= 64 and derived == answering.answer_helper_id(helper_id)
    assert derived.startswith(helper_id[:40]) and ".answer" in derived
    assert answering.answer_helper_id("b" * 63 + "c") != answering.answer_helper_id("b" * 64)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (OwnerAnswer(question_id="venue"), "exactly one"),
        (OwnerAnswer(question_id="venue", option_id="walk", text="walk"), "exactly one"),
        (OwnerAnswer(question_id=AUTHORIZATION_QUESTION_ID, option_id="grant", text="mail bob"), "action granted"),
        (OwnerAnswer(question_id="", option_id="walk"), "question_id"),
        (OwnerAnswer(question_id="v" * 65, option_id="walk"), "question_id"),
        (OwnerAnswer(question_id="venue", option_id="wa\x00lk"), "option_id"),
        (OwnerAnswer(question_id="venue", text="   "), "empty"),
        (OwnerAnswer(question_id="venue", text="x" * (ANSWER_TEXT_MAX_CHARS + 1)), "at most 4000"),
        (OwnerAnswer(question_id="venue", text="bad\x07bell"), "control"),
        (OwnerAnswer(question_id="venue", text="\ud800"), "UTF-8"),
    ],
)
def test_answer_problems_name_what_is_wrong(answer: OwnerAnswer, problem: str) -> None:
    problems = answering.answer_problems(answer)
    assert problems and problem in "; ".join(problems)


def test_the_answer_and_what_was_asked_survive_the_book_s_round_trip() -> None:
    """The book is carried on continue-as-new: the first answer stays the one after it."""
    book = asked_book()
    take(book, WALK)
    carried = OwnerBook.model_validate_json(book.model_dump_json())
    again = answering.decide(carried, "h1", OwnerAnswer(question_id="venue", option_id="taxi"), arrived_at=ANSWERED_AT)
    assert isinstance(again, answering.Repeated) and again.entry.answer == WALK


def test_a_book_without_the_answer_fields_still_reads() -> None:
    """A rollback or an older run's book: the new fields have defaults."""
    book = asked_book()
    data = book.model_dump(mode="json")
    for entry in data["entries"].values():
        del entry["asked"], entry["answer"]
    assert OwnerBook.model_validate(data).entries["h1"].asked is None


def test_a_request_for_another_owner_is_refused_in_its_language_and_changes_nothing() -> None:
    """R40: a raw client's request that reached another owner's coordinator is refused, whatever it is."""
    book = asked_book()
    before = book.model_dump()
    stray = HelperRequest(owner="boris", helper_id="h9", task="task", model="m", language="ru")
    judged = admission.judge(book, stray)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.WRONG_OWNER
    assert judged.message == text("refused.wrong_owner", "ru", owner="anna", asked="boris")
    answered = answering.judge(book, "boris", "h1", WALK, arrived_at=ANSWERED_AT)
    assert isinstance(answered, Refusal) and answered.code is RefusalCode.WRONG_OWNER
    assert book.model_dump() == before


def test_the_judgements_check_what_a_raw_client_sends() -> None:
    """R40: an answer out of its bounds and a close of a malformed id are invalid requests, judged before the book."""
    book = asked_book()
    both = OwnerAnswer(question_id="venue", option_id="walk", text="walk")
    judged = answering.judge(book, book.owner, "h1", both, arrived_at=ANSWERED_AT)
    assert isinstance(judged, Refusal) and judged.code is RefusalCode.INVALID_REQUEST
    assert "exactly one of option_id and text" in judged.message
    close = closing.judge(book, "../h1")
    assert isinstance(close, Refusal) and close.code is RefusalCode.INVALID_REQUEST
    assert book.entries["h1"].state is RowState.UNREPORTED


def test_a_follow_up_or_an_answer_of_a_helper_still_working_waits_for_its_notice_once() -> None:
    """R49: the row can show an outcome before the helper's notice reaches the book, so the judgement first says
    to wait; judged again after the wait, a helper still working is refused as such."""
    book = book_of()
    admit(book, "h1")
    follow = HelperRequest(owner="anna", helper_id="h2", task="go on", model="m", follow_up="h1")
    assert isinstance(admission.judge(book, follow), AwaitEarlier)
    assert isinstance(answering.judge(book, book.owner, "h1", WALK, arrived_at=ANSWERED_AT), AwaitEarlier)
    refused = admission.judge(book, follow, waited=True)
    assert isinstance(refused, Refusal) and refused.code is RefusalCode.NOT_FOLLOWABLE
    answered = answering.judge(book, book.owner, "h1", WALK, arrived_at=ANSWERED_AT, waited=True)
    assert isinstance(answered, Refusal) and answered.code is RefusalCode.NOT_ANSWERABLE
