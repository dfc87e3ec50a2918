"""The helper's run: its whole state as plain data, and every rule of it (R7-R9, R13, R15-R21, R35, R38).

`HelperWorkflow` holds one `HelperRun` and changes it only through the functions here; it keeps its timers, its
activity tasks and its I/O, and asks what to do: which trigger comes next (`next_trigger`, told which jobs are
done), what the trigger's answer means (`take`, which records it and looks the step up in
`domain.run.ending.decide`), what the step starts (`apply_step`), and what the ending writes and tells (`end_run`,
`finalize`, `finished_notice`). Nothing here does I/O, so unit and property tests cover every rule without
Temporal (tests/unit/test_helper_run.py, test_helper_run_stateful.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from domain.book import answering, retention
from domain.messages.activities import Finalize, FollowRequest, FollowResult, RowKey, SessionRef, Verdict
from domain.messages.signals import FinishedNotice
from domain.messages.workflows import HelperStart
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.run.ending import Ending, FinishReason, Phase, Step, Trigger, decide, row_state_of


class Job(StrEnum):
    """What runs beside the running loop: four activities, then the two timers. The order of the activities is
    the order an ending cancels them in."""

    OPEN = "open"
    FOLLOW = "follow"
    FINISH = "finish"
    CANCEL = "cancel"
    DEADLINE = "deadline"
    HARD_CEILING = "hard_ceiling"  # its timer starts once the deadline has passed: most helpers cost one timer


class HelperRun(BaseModel):
    """One helper's run, from its slot to its one outcome."""

    start: HelperStart
    slot: bool = False
    close_requested: bool = False
    generation: int = 1  # the coordinator wrote the admitted row at generation 1
    state: RowState = RowState.WAITING
    session_id: str | None = None
    jobs: set[Job] = Field(default_factory=set, description="Activities started whose answer is not taken yet.")
    followed: bool = False  # a follow was started (the first one records when following began)
    finish_reason: FinishReason | None = None  # set once finish-now was asked
    closing: bool = False  # closed by the owner while running; the slot waits for the core's stop (R7)
    stopping_for_authorization: bool = False
    deadline_seen: bool = False
    hard_ceiling_timed: bool = False
    last_result: FollowResult | None = None
    authorization_result: FollowResult | None = None
    ending: Ending | None = None
    open_unanswered: bool = False  # the create may have made a session whose id never came back (R38)
    outcome: OutcomeKind | None = None
    explanation: str = ""  # the outcome's owner-facing reason, once final

    @property
    def phase(self) -> Phase:
        return Phase.FOLLOWING if self.session_id is not None else Phase.OPENING


@dataclass(frozen=True)
class Starts:
    """What the workflow starts after a step, in this order; each at most once."""

    hard_ceiling_timer: bool = False
    close_row: RowKey | None = None  # the row to close, at its new generation (R21)
    finish: FinishReason | None = None
    cancel: bool = False
    follow: FollowRequest | None = None


def new_run(start: HelperStart) -> HelperRun:
    return HelperRun(
        start=start,
        slot=start.slot_granted,
        state=RowState.RUNNING if start.slot_granted else RowState.WAITING,
    )


def begin_running(run: HelperRun) -> bool:
    """The slot is here: the row runs at its next generation and the create is sent. Returns whether the row's
    state changed (a helper that started with its slot already shows running)."""
    changed = run.state is not RowState.RUNNING
    run.state = RowState.RUNNING
    run.generation += 1
    run.jobs.add(Job.OPEN)
    return changed


def next_trigger(run: HelperRun, done: set[Job]) -> Trigger | None:
    """The trigger to take now, given the jobs that are done, or None to wait. An answer already here wins over
    the ceiling: a core that finished is reported as finished. Each answer is taken once."""
    if run.ending is not None:
        return None
    answered = done & run.jobs
    if Job.FINISH in answered:
        return Trigger.FINISH_ANSWERED
    if Job.FOLLOW in answered:
        return Trigger.FOLLOW
    if Job.CANCEL in answered:
        return Trigger.CANCEL_ANSWERED
    if Job.OPEN in answered:
        return Trigger.OPENED
    if Job.HARD_CEILING in done:
        return Trigger.HARD_CEILING
    if run.close_requested and not run.closing:
        return Trigger.CLOSE
    if Job.DEADLINE in done and not run.deadline_seen:
        return Trigger.DEADLINE
    return None


def take(
    run: HelperRun,
    trigger: Trigger,
    *,
    follow: FollowResult | None = None,
    stopped: bool = False,
    session_id: str | None = None,
    deadline_passed: bool = False,
) -> Step:
    """Record the trigger's answer in the run and look the step up in the table. `follow` comes with FOLLOW,
    `stopped` with CANCEL_ANSWERED, `session_id` with OPENED (None: the create failed, no session exists) and
    `deadline_passed` with it."""
    match trigger:
        case Trigger.FOLLOW:
            assert follow is not None
            run.jobs.discard(Job.FOLLOW)
            run.last_result = follow
            if follow.verdict is Verdict.AUTHORIZATION:
                run.authorization_result = follow
            return decide(trigger, run, verdict=follow.verdict, status=follow.status, silent=follow.silent)
        case Trigger.OPENED:
            run.jobs.discard(Job.OPEN)
            if session_id is None:
                return decide(Trigger.OPEN_FAILED, run)
            run.session_id = session_id
            return decide(trigger, run, deadline_passed=deadline_passed)
        case Trigger.CANCEL_ANSWERED:
            run.jobs.discard(Job.CANCEL)
            return decide(trigger, run, stopped=stopped)
        case Trigger.FINISH_ANSWERED:
            run.jobs.discard(Job.FINISH)
        case Trigger.DEADLINE:
            run.deadline_seen = True
    return decide(trigger, run)


def apply_step(run: HelperRun, step: Step) -> Starts:
    """Record a step that does not end the run, and return what the workflow starts for it: finish-now at most
    once and only with a session (R13, R15), one cancel at a time and only with a session, the row closed at
    once (R21), the follow again. After an ending nothing starts."""
    assert step.end is None
    if run.ending is not None:
        return Starts()
    hard_ceiling_timer = run.deadline_seen and not run.hard_ceiling_timed
    run.hard_ceiling_timed = run.hard_ceiling_timed or hard_ceiling_timer
    close_row = None
    if step.close_row:
        run.closing = True
        run.generation += 1
        close_row = row_key(run)
    if step.stopping_for_authorization:
        run.stopping_for_authorization = True
    finish = None
    if step.finish is not None and run.finish_reason is None and run.session_id is not None:
        run.finish_reason = finish = step.finish
        run.jobs.add(Job.FINISH)
    cancel = step.cancel and Job.CANCEL not in run.jobs and run.session_id is not None
    if cancel:
        run.jobs.add(Job.CANCEL)
    follow = None
    if step.follow:
        follow = _follow_request(run, step.watch_work_ceiling, step.stop_at_pauses)
        run.jobs.add(Job.FOLLOW)
    return Starts(
        hard_ceiling_timer=hard_ceiling_timer, close_row=close_row, finish=finish, cancel=cancel, follow=follow
    )


def _follow_request(run: HelperRun, watch_work_ceiling: bool, stop_at_pauses: bool) -> FollowRequest:
    assert run.session_id is not None and Job.FOLLOW not in run.jobs
    start = run.start
    records_start, run.followed = not run.followed, True
    return FollowRequest(
        owner=start.owner,
        helper_id=start.helper_id,
        seq=start.seq,
        session_id=run.session_id,
        generation=run.generation,
        ceiling_tokens=start.limits.ceiling_tokens,
        watch_work_ceiling=watch_work_ceiling,
        stop_at_pauses=stop_at_pauses,
        tuning=start.follow,
        check_ms=start.check_ms,
        records_start=records_start,
    )


def row_closed(run: HelperRun) -> None:
    """The closed row is written: it shows closed, unless the outcome was written meanwhile."""
    if run.outcome is None:
        run.state = RowState.CLOSED


# --- the ending ------------------------------------------------------------------------------------------


def end_run(run: HelperRun, ending: Ending, done: set[Job]) -> FollowResult | None:
    """The run ends, once: every job still in flight is cancelled by the workflow. A create still unanswered
    may have made a session under the helper's key, so the slot is kept until it is found (R38). Returns the
    follow result whose details the outcome carries: an authorization outcome names the authorization its
    wait asked for, with the actions of the last result (R17)."""
    assert run.ending is None
    run.ending = ending
    run.open_unanswered = Job.OPEN in run.jobs and Job.OPEN not in done
    run.jobs.clear()
    result = run.last_result
    if ending.kind is OutcomeKind.AUTHORIZATION and run.authorization_result is not None:
        result = run.authorization_result.model_copy(update={"actions": (result or run.authorization_result).actions})
    return result


def keep_until(state: RowState, finished_at: datetime, keep_ms: int | None) -> datetime | None:
    """A closed row's removal time, by the book's rule and the owner's policy (R29); None for every other row, and
    for an owner without a keep of its own (the coordinator's then)."""
    if state is not RowState.CLOSED or keep_ms is None:
        return None
    return retention.kept_until(finished_at, keep_ms)


def finalize(
    run: HelperRun, kind: OutcomeKind, explanation: str, result: FollowResult | None, finished_at: datetime
) -> Finalize:
    """The one outcome to write (R18, R19), at the row's next generation."""
    start = run.start
    state = row_state_of(kind)
    run.generation += 1
    return Finalize(
        row=row_key(run),
        kind=kind,
        state=state,
        language=start.language,
        model=start.model,
        explanation=explanation,
        session_id=run.session_id,
        question=result.question if result and kind is OutcomeKind.QUESTION else None,
        choices=result.choices if result and kind is OutcomeKind.QUESTION else None,
        authorization=result.authorization if result and kind is OutcomeKind.AUTHORIZATION else None,
        actions=result.actions if result else [],
        actions_total=result.actions_total if result else 0,
        refusals=result.refusals if result else [],
        usage=result.usage if result and result.usage.steps else None,
        summary_max=start.summary_max,
        finished_at=finished_at,
        keep_until=keep_until(state, finished_at, start.keep_ms),
    )


def record_outcome(run: HelperRun, kind: OutcomeKind, explanation: str) -> None:
    """The outcome the row holds: the one written, or the one an earlier run of the write left (R19)."""
    run.outcome = kind
    run.explanation = explanation
    run.state = row_state_of(kind)


def finished_notice(run: HelperRun, finished_at: datetime, result: FollowResult | None = None) -> FinishedNotice:
    """The coordinator's notice of the outcome: the slot passes on, unless a create was never answered; then a
    second notice, the same with `slot_held` False, frees it once the session is found and stopped (R8, R38).
    A question or an authorization wait says what it takes as an answer, from `result`, the outcome's (R49)."""
    assert run.outcome is not None
    start = run.start
    asked = answering.asked_of(
        run.outcome,
        choices=result.choices if result is not None else None,
        authorization_action=result.authorization_action if result is not None else None,
        model=start.model,
        boundary=start.boundary,
    )
    return FinishedNotice(
        helper_id=run.start.helper_id,
        seq=run.start.seq,
        kind=run.outcome,
        generation=run.generation,
        finished_at=finished_at,
        slot_held=run.open_unanswered,
        asked=asked,
    )


# --- the shapes the activities take ----------------------------------------------------------------------


def row_key(run: HelperRun) -> RowKey:
    start = run.start
    return RowKey(owner=start.owner, helper_id=start.helper_id, seq=start.seq, generation=run.generation)


def session_ref(run: HelperRun) -> SessionRef:
    assert run.session_id is not None
    start = run.start
    return SessionRef(owner=start.owner, helper_id=start.helper_id, session_id=run.session_id, check_ms=start.check_ms)
