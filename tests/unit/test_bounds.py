"""Every payload the runtime hands Temporal stays under the cap, at its worst (R36)."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.contrib.pydantic import pydantic_data_converter

from contracts.core_api import (
    MAX_CHOICE_ID_CHARS,
    MAX_OPTION_LABEL_CHARS,
    MAX_QUESTION_OPTIONS,
    Action,
    Authorization,
    QuestionChoices,
    QuestionOption,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
)
from domain.book import Entry, OwnerBook
from domain.book.state import EARLY_NOTICES_KEPT
from domain.bounds import PAYLOAD_ACTIONS_MAX, PAYLOAD_MAX_BYTES, PAYLOAD_REFUSALS_MAX, PAYLOAD_TEXT_MAX
from domain.limits import HELPER_MAX_ROWS, FollowTuning, Limits
from domain.messages.activities import Finalize, FollowResult, RowKey, Verdict
from domain.messages.signals import FinishedNotice
from domain.messages.workflows import HelperStart
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.run.follow import result_from

NOW = datetime(2026, 11, 30, tzinfo=UTC)
HUGE = "я" * 500_000  # two bytes a character in UTF-8; far above every cap


def _size(value: object) -> int:
    payloads = pydantic_data_converter.payload_converter.to_payloads([value])
    return sum(payload.ByteSize() for payload in payloads)


def _monster_snapshot() -> Snapshot:
    """What a misbehaving, or just very busy, core may send: 10,000 actions, 5 MB texts everywhere."""
    action = Action(tool="send_mail", whom="x" * 2_000 + "@example.com", what="y" * 2_000, at=NOW)
    return Snapshot(
        session_id="s-1",
        status=SessionStatus.AUTHORIZATION,
        steps=[StepUsage(index=i, input_tokens=1_000 * i, output_tokens=10) for i in range(1, 81)],
        input_tokens_total=3_240_000,
        last_message=HUGE,
        question=HUGE,
        authorization=Authorization(action=HUGE, reason=HUGE),
        actions=[action] * 10_000,
        refusals=["r" * 50_000] * 200,
        outcome=SessionOutcome(kind=SessionStatus.PARTIAL, text=HUGE),
        error=HUGE,
    )


def test_a_follow_result_stays_small_whatever_the_snapshot() -> None:
    """R36: the follow's result carries the first actions and refusals with their totals, and cut texts."""
    result = result_from(_monster_snapshot(), Verdict.AUTHORIZATION)
    assert _size(result) < PAYLOAD_MAX_BYTES
    assert len(result.actions) == PAYLOAD_ACTIONS_MAX and result.actions_total == 10_000
    assert len(result.refusals) == PAYLOAD_REFUSALS_MAX and result.refusals_total == 200
    assert result.question is not None and len(result.question) == PAYLOAD_TEXT_MAX
    assert result.question.endswith("…")


def test_a_question_with_the_largest_choices_stays_small() -> None:
    """R36, R49: a question's choices pass whole; at their largest (ten options of 200 four-byte characters, ids
    of 64) the follow's result, with every other text at its worst, stays under the cap."""
    widest = QuestionChoices(
        question_id="q" * MAX_CHOICE_ID_CHARS,
        options=[
            QuestionOption(id=f"{n}".rjust(MAX_CHOICE_ID_CHARS, "o"), label="🙂" * MAX_OPTION_LABEL_CHARS)
            for n in range(MAX_QUESTION_OPTIONS)
        ],
        free_text=True,
    )
    asked = _monster_snapshot().model_copy(update={"status": SessionStatus.QUESTION, "choices": widest})
    result = result_from(asked, Verdict.QUESTION)
    assert result.choices == widest
    assert _size(result) < PAYLOAD_MAX_BYTES
    assert _size(widest) < 16 * 1024


def test_the_finalizer_input_stays_small() -> None:
    """R36: the one finalizer's input, built from the largest follow result, stays under the cap."""
    result = result_from(_monster_snapshot(), Verdict.AUTHORIZATION)
    final = Finalize(
        row=RowKey(owner="o" * 64, helper_id="h" * 64, seq=1, generation=9),
        kind=OutcomeKind.AUTHORIZATION,
        state=RowState.UNREPORTED,
        language="en",
        model="m" * 100,
        explanation="e" * 2_000,
        session_id="s-1",
        question=result.question,
        authorization=result.authorization,
        actions=result.actions,
        actions_total=result.actions_total,
        refusals=result.refusals,
        usage=result.usage,
        summary_max=1_500,
        finished_at=NOW,
    )
    assert _size(final) < PAYLOAD_MAX_BYTES


def test_a_full_owner_book_stays_small() -> None:
    """R36: the coordinator's book (its continue-as-new input and query answer) at every cap at once."""
    book = OwnerBook(owner="o" * 64)
    for n in range(HELPER_MAX_ROWS):
        helper_id = f"{n:02d}" + "h" * 62
        book.entries[helper_id] = Entry(
            helper_id=helper_id, seq=n, state=RowState.UNREPORTED, hard_ceiling_ms=2_820_000, admitted_at=NOW
        )
        book.turn_reads[f"turn-{n}" + "t" * 180] = [helper_id]
    book.recently_removed = [f"{n:03d}" + "r" * 61 for n in range(100)]
    book.early_notices = [
        FinishedNotice(
            helper_id=f"{n:02d}" + "e" * 62, seq=n, kind=OutcomeKind.COMPLETED, generation=3, finished_at=NOW
        )
        for n in range(EARLY_NOTICES_KEPT)
    ]
    assert _size(book) < PAYLOAD_MAX_BYTES


def test_a_helper_start_stays_small() -> None:
    """R36: a helper's start input carries the title, never the task."""
    start = HelperStart(
        owner="o" * 64,
        helper_id="h" * 64,
        seq=1,
        goal_id="g" * 64,
        language="ru",
        model="m" * 100,
        limits=Limits(),
        slot_granted=True,
        summary_max=1_500,
        check_ms=15_000,
        follow=FollowTuning(),
        title="t" * 81,
    )
    assert _size(start) < 4_096


def test_an_error_result_stays_small() -> None:
    """R36: a failing follow's error text is cut too."""
    result = FollowResult(verdict=Verdict.CORE_FAILED, error="x" * PAYLOAD_TEXT_MAX)
    assert _size(result) < PAYLOAD_MAX_BYTES
