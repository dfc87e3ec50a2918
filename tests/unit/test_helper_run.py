"""The helper's run as plain data: the rules the workflow asks about (R7-R9, R13, R15-R21, R35, R38)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contracts.core_api import Action, QuestionChoices, QuestionOption, SessionStatus
from domain.book.writes import helper_start
from domain.limits import Limits, Policy
from domain.messages.activities import FollowResult, Verdict
from domain.messages.workflows import HelperStart
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.run.ending import CLOSED, Ending, Explanation, FinishReason, Step, Trigger
from domain.run.helper_run import (
    HelperRun,
    Job,
    Starts,
    apply_step,
    begin_running,
    end_run,
    finalize,
    finished_notice,
    keep_until,
    new_run,
    next_trigger,
    record_outcome,
    row_closed,
    take,
)
from domain.work import Usage

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
KEEP_MS = 3_600_000


REQUEST = HelperRequest(owner="anna", helper_id="h1", task="task", model="m")


def start_of(slot_granted: bool = True, keep_ms: int | None = KEEP_MS) -> HelperStart:
    start = helper_start(Policy(keep_ms=KEEP_MS), REQUEST, seq=3, limits=Limits(), slot_granted=slot_granted)
    return start.model_copy(update={"keep_ms": keep_ms})


def following(**fields: object) -> HelperRun:
    """A run whose create was answered and whose first follow runs."""
    run = new_run(start_of())
    begin_running(run)
    take(run, Trigger.OPENED, session_id="s-1")
    assert apply_step(run, Step(follow=True)).follow is not None
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def action(what: str) -> Action:
    return Action(tool="mail", whom="bob", what=what, at=T0)


def test_a_run_starts_waiting_or_running() -> None:
    """R6: a helper admitted with a free slot runs at once; the others wait for theirs."""
    assert new_run(start_of(slot_granted=True)).state is RowState.RUNNING
    waiting = new_run(start_of(slot_granted=False))
    assert waiting.state is RowState.WAITING and not waiting.slot


def test_running_sends_the_create_at_the_next_generation() -> None:
    """R9, R19: the row runs at generation 2 (the coordinator admitted it at 1) and the create is in flight."""
    run = new_run(start_of(slot_granted=False))
    assert begin_running(run) is True
    assert run.state is RowState.RUNNING and run.generation == 2 and run.jobs == {Job.OPEN}
    assert begin_running(new_run(start_of(slot_granted=True))) is False  # it showed running already


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        (set(Job), Trigger.FINISH_ANSWERED),
        (set(Job) - {Job.FINISH}, Trigger.FOLLOW),
        ({Job.CANCEL, Job.HARD_CEILING, Job.DEADLINE}, Trigger.CANCEL_ANSWERED),
        ({Job.HARD_CEILING, Job.DEADLINE}, Trigger.HARD_CEILING),
        ({Job.DEADLINE}, Trigger.CLOSE),
    ],
)
def test_an_answer_here_wins_over_the_ceiling(done: set[Job], expected: Trigger) -> None:
    """R35: answers first (finish-now, the follow, a cancel, the create), then the hard ceiling, then a close,
    then the deadline: a core that finished is reported as finished."""
    run = following(close_requested=True)
    run.jobs |= {Job.FINISH, Job.CANCEL}
    assert next_trigger(run, done) is expected


def test_the_open_answer_comes_before_the_ceiling() -> None:
    run = new_run(start_of())
    begin_running(run)
    assert next_trigger(run, {Job.OPEN, Job.HARD_CEILING}) is Trigger.OPENED
    assert next_trigger(run, {Job.HARD_CEILING}) is Trigger.HARD_CEILING


def test_each_answer_and_each_event_is_taken_once() -> None:
    """A close and the deadline are taken once; an answer not asked for, or already taken, is no trigger."""
    run = following(close_requested=True)
    assert next_trigger(run, {Job.CANCEL, Job.FINISH}) is Trigger.CLOSE  # neither is in flight
    apply_step(run, take(run, Trigger.CLOSE))
    assert run.closing and next_trigger(run, {Job.DEADLINE}) is Trigger.DEADLINE
    take(run, Trigger.DEADLINE)
    assert next_trigger(run, {Job.DEADLINE}) is None
    assert next_trigger(run, set()) is None


def test_the_create_answered_or_refused() -> None:
    """R9: a session id starts the follow; a refused create ends the helper failed, with no session."""
    run = new_run(start_of())
    begin_running(run)
    step = take(run, Trigger.OPENED, session_id="s-1", deadline_passed=True)
    assert run.session_id == "s-1" and Job.OPEN not in run.jobs
    assert step == Step(follow=True, finish=FinishReason.DEADLINE)
    refused = new_run(start_of())
    begin_running(refused)
    step = take(refused, Trigger.OPENED, session_id=None)
    assert step.end == Ending(OutcomeKind.FAILED, Explanation.CORE_REJECTED) and refused.session_id is None


def test_finish_now_is_asked_once_and_only_of_a_session() -> None:
    """R13, R15: the deadline and the work ceiling share one finish-now."""
    run = following()
    assert apply_step(run, Step(finish=FinishReason.WORK_CEILING)).finish is FinishReason.WORK_CEILING
    assert run.finish_reason is FinishReason.WORK_CEILING and Job.FINISH in run.jobs
    take(run, Trigger.FINISH_ANSWERED)
    assert apply_step(run, Step(finish=FinishReason.DEADLINE)).finish is None
    assert run.finish_reason is FinishReason.WORK_CEILING
    opening = new_run(start_of())
    begin_running(opening)
    assert apply_step(opening, Step(finish=FinishReason.DEADLINE)) == Starts()
    assert opening.finish_reason is None


def test_one_cancel_at_a_time_and_only_of_a_session() -> None:
    """R7, R17: a close during the authorization cleanup's cancel sends no second one; a cancel answered
    without a stop leaves room for the next."""
    run = following()
    assert apply_step(run, take(run, Trigger.FOLLOW, follow=FollowResult(verdict=Verdict.AUTHORIZATION))).cancel
    run.close_requested = True
    starts = apply_step(run, take(run, Trigger.CLOSE))
    assert not starts.cancel and starts.close_row is not None
    assert take(run, Trigger.CANCEL_ANSWERED, stopped=False) == Step()
    assert Job.CANCEL not in run.jobs
    opening = new_run(start_of())
    begin_running(opening)
    opening.close_requested = True
    assert not apply_step(opening, take(opening, Trigger.CLOSE)).cancel  # it waits for the session id
    assert apply_step(opening, take(opening, Trigger.OPENED, session_id="s-1")).cancel


def test_closing_the_row_moves_it_to_the_next_generation() -> None:
    """R21: the row closes at once, at a generation of its own; it shows closed unless the outcome came first."""
    run = following(close_requested=True)
    generation = run.generation
    starts = apply_step(run, take(run, Trigger.CLOSE))
    assert starts.close_row is not None and starts.close_row.generation == generation + 1 == run.generation
    assert run.closing
    row_closed(run)
    assert run.state is RowState.CLOSED
    done = following()
    record_outcome(done, OutcomeKind.COMPLETED, "")
    row_closed(done)
    assert done.state is RowState.UNREPORTED


def test_only_the_first_follow_records_the_start() -> None:
    """The first follow writes when following began: one write per helper; each follow carries the generation."""
    run = new_run(start_of())
    begin_running(run)
    first = apply_step(run, take(run, Trigger.OPENED, session_id="s-1")).follow
    assert first is not None and first.records_start and first.generation == run.generation
    again = apply_step(run, take(run, Trigger.FOLLOW, follow=FollowResult(verdict=Verdict.WORK_CEILING))).follow
    assert again is not None and not again.records_start and not again.watch_work_ceiling


def test_the_hard_ceilings_timer_starts_once_the_deadline_passed() -> None:
    """R15: most helpers end before their deadline and cost one timer; the second starts at the deadline."""
    run = following()
    assert not apply_step(run, Step()).hard_ceiling_timer
    assert apply_step(run, take(run, Trigger.DEADLINE)).hard_ceiling_timer
    assert not apply_step(run, Step()).hard_ceiling_timer


def test_nothing_starts_after_the_ending() -> None:
    run = following(close_requested=True)
    end_run(run, CLOSED, set())
    assert run.jobs == set() and next_trigger(run, set(Job)) is None
    assert apply_step(run, Step(close_row=True, cancel=True, finish=FinishReason.DEADLINE, follow=True)) == Starts()


def test_an_unanswered_create_keeps_the_slot() -> None:
    """R38: a create still unanswered at the ending may have made a session: the notice keeps the slot."""
    run = new_run(start_of())
    begin_running(run)
    end_run(run, Ending(OutcomeKind.FAILED, Explanation.NO_START), {Job.HARD_CEILING})
    final = finalize(run, OutcomeKind.FAILED, "no start", None, T0)
    record_outcome(run, final.kind, final.explanation)
    assert finished_notice(run, T0).slot_held
    answered = new_run(start_of())
    begin_running(answered)
    end_run(answered, Ending(OutcomeKind.FAILED, Explanation.NO_START), {Job.OPEN, Job.HARD_CEILING})
    assert not answered.open_unanswered


def test_an_authorization_outcome_names_the_wait_with_the_last_actions() -> None:
    """R17: the cleanup cancel ends the wait; the outcome names the authorization asked for, with the actions
    the session had done by its end."""
    run = following()
    waiting = FollowResult(verdict=Verdict.AUTHORIZATION, authorization="send mail", actions=[action("1")])
    apply_step(run, take(run, Trigger.FOLLOW, follow=waiting))
    ended = FollowResult(verdict=Verdict.TERMINAL, status=SessionStatus.CANCELLED, actions=[action("1"), action("2")])
    step = take(run, Trigger.FOLLOW, follow=ended)
    assert step.end == Ending(OutcomeKind.AUTHORIZATION)
    result = end_run(run, step.end, set())
    assert result is not None and result.authorization == "send mail" and result.actions == ended.actions
    final = finalize(run, OutcomeKind.AUTHORIZATION, "", result, T0)
    assert final.authorization == "send mail" and final.question is None and len(final.actions) == 2


def test_other_outcomes_carry_the_last_result() -> None:
    run = following()
    last = FollowResult(
        verdict=Verdict.QUESTION, question="which?", actions_total=4, usage=Usage(steps=2, work_tokens=10)
    )
    step = take(run, Trigger.FOLLOW, follow=last)
    assert step.end is not None
    result = end_run(run, step.end, set())
    assert result == last
    final = finalize(run, OutcomeKind.QUESTION, "", result, T0)
    assert final.question == "which?" and final.actions_total == 4 and final.usage == last.usage
    assert final.authorization is None and final.state is RowState.UNREPORTED


def test_the_outcome_and_the_notice_carry_the_next_generation() -> None:
    """R19: the outcome is written at a generation above every earlier write, and the notice names it."""
    run = following()
    before = run.generation
    end_run(run, Ending(OutcomeKind.COMPLETED), set())
    final = finalize(run, OutcomeKind.COMPLETED, "", None, T0)
    assert final.row.generation == run.generation == before + 1
    record_outcome(run, OutcomeKind.FAILED, "written first")  # an earlier run of the write left this one
    notice = finished_notice(run, T0)
    assert notice.kind is OutcomeKind.FAILED and notice.generation == run.generation and not notice.slot_held
    assert run.state is RowState.UNREPORTED and run.explanation == "written first"


def test_a_closed_row_is_kept_for_the_owners_keep() -> None:
    """R29: a closed row goes after the owner's keep; an unreported row waits to be told, with no end."""
    assert keep_until(RowState.CLOSED, T0, KEEP_MS) == T0 + timedelta(milliseconds=KEEP_MS)
    assert keep_until(RowState.UNREPORTED, T0, KEEP_MS) is None
    assert keep_until(RowState.CLOSED, T0, None) is None  # the coordinator's keep then
    run = new_run(start_of(slot_granted=False))
    run.close_requested = True
    end_run(run, CLOSED, set())
    final = finalize(run, OutcomeKind.CLOSED, "closed", None, T0)
    assert final.state is RowState.CLOSED and final.keep_until == T0 + timedelta(milliseconds=KEEP_MS)
    assert final.session_id is None and final.row.generation == 2


def test_the_notice_of_a_question_or_an_authorization_says_what_it_takes_as_an_answer() -> None:
    """R49: the coordinator checks answers against what the notice carries: the question's id and options, or the
    item an authorization wait asks for; with the helper's model and boundary for the follow-up."""
    start = helper_start(
        Policy(),
        REQUEST.model_copy(update={"boundary": ("send_mail to anna@example.com",)}),
        seq=3,
        limits=Limits(),
        slot_granted=True,
    )
    assert start.boundary == ("send_mail to anna@example.com",)
    choices = QuestionChoices(question_id="venue", options=[QuestionOption(id="walk", label="Walk")])
    for kind, result in (
        (OutcomeKind.QUESTION, FollowResult(verdict=Verdict.QUESTION, question="where?", choices=choices)),
        (
            OutcomeKind.AUTHORIZATION,
            FollowResult(
                verdict=Verdict.AUTHORIZATION,
                authorization="send_mail to bob@example.com — to send the offer",
                authorization_action="send_mail to bob@example.com",
            ),
        ),
        (OutcomeKind.COMPLETED, FollowResult(verdict=Verdict.TERMINAL)),
    ):
        run = new_run(start)
        record_outcome(run, kind, "")
        asked = finished_notice(run, T0, result).asked
        if kind is OutcomeKind.COMPLETED:
            assert asked is None
            continue
        assert asked is not None and asked.model == "m" and asked.boundary == start.boundary
        if kind is OutcomeKind.QUESTION:
            assert (asked.question_id, asked.choices, asked.grant) == ("venue", choices, None)
        else:
            assert (asked.question_id, asked.grant) == ("authorization", "send_mail to bob@example.com")
