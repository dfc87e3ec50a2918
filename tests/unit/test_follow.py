"""What a session snapshot means for its helper (R11, R13, R16, R17, R24)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.core_api import (
    Action,
    Authorization,
    QuestionChoices,
    QuestionOption,
    SessionOutcome,
    SessionStatus,
    Snapshot,
    StepUsage,
    StopReason,
)
from domain.limits import FollowTuning
from domain.messages.activities import Verdict
from domain.run.follow import judge, next_read_waits, result_from
from domain.work import Usage

TERMINAL = [
    SessionStatus.COMPLETED,
    SessionStatus.PARTIAL,
    SessionStatus.FAILED,
    SessionStatus.CANCELLED,
    SessionStatus.INTERRUPTED,
]
CEILING = 1_000


def snapshot(status: SessionStatus, **fields: object) -> Snapshot:
    return Snapshot.model_validate({"session_id": "s-1", "status": status, "input_tokens_total": 0, **fields})


def test_terminal_statuses_are_exactly_the_ended_ones() -> None:
    """R11: the five ending statuses are terminal; running and the two pauses are not."""
    assert {s for s in SessionStatus if s.is_terminal} == set(TERMINAL)


@pytest.mark.parametrize("status", TERMINAL)
@pytest.mark.parametrize("work", [0, CEILING, 10 * CEILING])
def test_terminal_status_is_terminal_whatever_the_work(status: SessionStatus, work: int) -> None:
    """R11: an ended session is terminal, even past the work ceiling."""
    assert judge(snapshot(status), Usage(work_tokens=work), CEILING, watch_work_ceiling=True) is Verdict.TERMINAL


@pytest.mark.parametrize("watch", [True, False])
def test_question_is_reported(watch: bool) -> None:
    """R16: a question pauses the helper, before the work ceiling is considered."""
    usage = Usage(work_tokens=5 * CEILING)
    assert judge(snapshot(SessionStatus.QUESTION), usage, CEILING, watch_work_ceiling=watch) is Verdict.QUESTION


@pytest.mark.parametrize("watch", [True, False])
def test_authorization_wait_is_reported(watch: bool) -> None:
    """R17: an authorization wait is reported, before the work ceiling is considered."""
    usage = Usage(work_tokens=5 * CEILING)
    verdict = judge(snapshot(SessionStatus.AUTHORIZATION), usage, CEILING, watch_work_ceiling=watch)
    assert verdict is Verdict.AUTHORIZATION


@pytest.mark.parametrize("work", [CEILING, CEILING + 1])
def test_work_ceiling_when_watched(work: int) -> None:
    """R13: a running session at or past HELPER_CEILING_TOKENS reaches the work ceiling."""
    verdict = judge(snapshot(SessionStatus.RUNNING), Usage(work_tokens=work), CEILING, watch_work_ceiling=True)
    assert verdict is Verdict.WORK_CEILING


def test_work_ceiling_is_not_reported_when_no_longer_watched() -> None:
    """R13: once finish-now was asked for, the ceiling is not reported again."""
    assert judge(snapshot(SessionStatus.RUNNING), Usage(work_tokens=2 * CEILING), CEILING, False) is None


def test_running_below_the_ceiling_keeps_following() -> None:
    """R11: nothing to decide while the session runs below the ceiling."""
    assert judge(snapshot(SessionStatus.RUNNING), Usage(work_tokens=CEILING - 1), CEILING, True) is None


def test_result_from_folds_the_snapshot() -> None:
    """R11, R12, R17, R18: the result carries folded usage, the authorization needed, actions and refusals."""
    at = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    snap = snapshot(
        SessionStatus.AUTHORIZATION,
        steps=[
            StepUsage(index=2, input_tokens=1_500, output_tokens=10),
            StepUsage(index=1, input_tokens=1_000, output_tokens=20),
        ],
        input_tokens_total=2_500,
        authorization=Authorization(action="send_mail", reason="to the whole board"),
        actions=[Action(tool="draft_mail", whom="owner", what="drafted", at=at)],
        refusals=["delete_files: outside the boundary"],
        outcome=SessionOutcome(kind=SessionStatus.PARTIAL, text="half", stop_reason=StopReason.STEPS),
    )
    result = result_from(snap, Verdict.AUTHORIZATION)
    assert result.verdict is Verdict.AUTHORIZATION
    assert result.usage == Usage(steps=2, work_tokens=1_000 + 20 + 500 + 10, input_tokens=2_500)
    assert result.authorization == "send_mail — to the whole board"
    assert result.actions == snap.actions and result.refusals == snap.refusals
    assert result.stop_reason is StopReason.STEPS


def test_result_from_without_reason_or_authorization() -> None:
    """R17: an authorization without a reason is just the action; none at all is None."""
    with_action = snapshot(SessionStatus.AUTHORIZATION, authorization=Authorization(action="send_mail"))
    assert result_from(with_action, Verdict.AUTHORIZATION).authorization == "send_mail"
    plain = result_from(snapshot(SessionStatus.COMPLETED), Verdict.TERMINAL)
    assert plain.authorization is None and plain.stop_reason is None and plain.usage == Usage()


CHOICES = QuestionChoices(
    question_id="venue-1",
    options=[QuestionOption(id="walk", label="Walking distance"), QuestionOption(id="taxi", label="A taxi is fine")],
    free_text=True,
)


def test_a_structured_question_reaches_the_workflow_with_its_choices() -> None:
    """R49, R16: a question's id, options and free-text rule come with the QUESTION verdict, as the core sent them."""
    asked = snapshot(SessionStatus.QUESTION, question="Walk or taxi?", choices=CHOICES.model_dump())
    result = result_from(asked, Verdict.QUESTION)
    assert (result.question, result.choices) == ("Walk or taxi?", CHOICES)
    assert result_from(snapshot(SessionStatus.QUESTION, question="Which week?"), Verdict.QUESTION).choices is None


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (SessionStatus.CANCELLED, Verdict.TERMINAL),  # a pause cancelled keeps what it asked
        (SessionStatus.RUNNING, Verdict.WORK_CEILING),
        (SessionStatus.COMPLETED, Verdict.TERMINAL),
    ],
)
def test_choices_with_another_status_are_not_read(status: SessionStatus, verdict: Verdict) -> None:
    """R49, R37: choices mean something only while the session asks; with another status they never reach the
    workflow (the contract: not read)."""
    other = snapshot(status, question="Walk or taxi?", choices=CHOICES.model_dump())
    assert result_from(other, verdict).choices is None


def test_the_defaults_cost_at_most_six_reads_a_minute() -> None:
    """R44: an idle helper's reads a minute with the default tuning."""
    assert 60_000 / FollowTuning().wait_ms <= 6


@pytest.mark.parametrize(
    ("long_polled", "changed", "elapsed_ms", "at_once"),
    [
        (True, True, 5, True),  # a change came back: ask again at once, the core waits
        (True, False, 19_000, True),  # the core held the read: it waits, not us
        (True, False, 3, False),  # answered at once with nothing new: a core ignoring the wait is paced
        (False, True, 5, False),  # a polled core: always the poll interval
        (False, False, 19_000, False),
    ],
)
def test_the_next_read_goes_at_once_only_when_the_core_did_the_waiting(
    long_polled: bool, changed: bool, elapsed_ms: float, at_once: bool
) -> None:
    """R44: never a tight loop against a core that advertises long poll but answers at once."""
    assert next_read_waits(long_polled, changed, elapsed_ms, 20_000) is at_once
