"""A stateful property test of the helper's run (R7, R13, R15-R21, R35, R38).

The machine drives `HelperRun` exactly as `workflows/helper.py` combines the pure functions: the slot or a
close wakes the run (`begin_running`, or the closed ending at once), then each loop turn asks `next_trigger`
which answer or event comes next, `take`s it and either ends (`end_run`, `finalize`, `record_outcome`,
`finished_notice`) or `apply_step`s and starts what it says. Between turns, anything may arrive in any order:
the owner's close, the create's answer (a session or a refusal), the follow's verdicts, a cancel's or a
finish-now's answer, the deadline, the hard ceiling. After every step it checks the run's promises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from contracts.core_api import SessionStatus
from domain.book.writes import helper_start
from domain.limits import Limits, Policy
from domain.messages.activities import FollowResult, Verdict
from domain.messages.workflows import HelperStart
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest
from domain.rows import RowState
from domain.run.ending import Ending, Explanation, FinishReason, Step, Trigger
from domain.run.helper_run import (
    Job,
    Starts,
    apply_step,
    begin_running,
    end_run,
    finalize,
    finished_notice,
    new_run,
    next_trigger,
    record_outcome,
    take,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TERMINAL = [s for s in SessionStatus if s.is_terminal]
ACTIVITIES = {Job.OPEN, Job.FOLLOW, Job.FINISH, Job.CANCEL}
EXERCISED = [
    *(f"ended {kind.value}" for kind in OutcomeKind),
    "closed before the slot",
    "closed while opening",
    "slot held for an unanswered create",
    "finish-now for the deadline",
    "finish-now for the work ceiling",
    "cancel for the close after the authorization cleanup's",
    "ended by the hard ceiling",
]
MIN_TOTAL_STEPS = 10_000
# The job whose answer a trigger takes.
ANSWERED_JOB = {
    Trigger.FOLLOW: Job.FOLLOW,
    Trigger.CANCEL_ANSWERED: Job.CANCEL,
    Trigger.OPENED: Job.OPEN,
    Trigger.FINISH_ANSWERED: Job.FINISH,
}


REQUEST = HelperRequest(owner="anna", helper_id="h1", task="task", model="m")


@dataclass
class Counter:
    steps: int = 0
    seen: dict[str, int] = field(default_factory=dict)

    def saw(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1


STEPS = Counter()

# The verdicts that end a run, and those after which the follow goes on.
ending_results = st.one_of(
    st.builds(FollowResult, verdict=st.just(Verdict.TERMINAL), status=st.sampled_from(TERMINAL)),
    st.builds(
        FollowResult,
        verdict=st.sampled_from([Verdict.QUESTION, Verdict.LOST, Verdict.CORE_FAILED]),
        silent=st.booleans(),
    ),
)
going_on_results = st.builds(
    FollowResult,
    verdict=st.sampled_from([Verdict.AUTHORIZATION, Verdict.WORK_CEILING]),
    authorization=st.sampled_from([None, "send the mail"]),
)


class HelperRunMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.run = new_run(start_of(slot_granted=False))
        self.woken = False
        self.running = False  # the running phase began (the timers run)
        self.done: set[Job] = set()  # jobs whose answer is here, or timers that fired
        self.answers: dict[Job, object] = {}
        self.endings: list[Ending] = []
        self.finishes: list[FinishReason] = []
        self.cancels: list[str] = []
        self.generation = self.run.generation
        self.closed_before_session = False
        self.slot_held: bool | None = None

    # --- the workflow's loop --------------------------------------------------------------------------

    def _turn(self) -> bool:
        """One turn of the running loop; False when no trigger is there."""
        run = self.run
        done = set(self.done)
        trigger = next_trigger(run, done)
        if trigger is None:
            return False
        job = ANSWERED_JOB.get(trigger)
        answer = self.answers.pop(job, None) if job is not None else None
        if job is not None:
            self.done.discard(job)  # the workflow pops the answered task
        if job is Job.FOLLOW:
            assert isinstance(answer, FollowResult)
            step = take(run, trigger, follow=answer)
        elif job is Job.CANCEL:
            step = take(run, trigger, stopped=bool(answer))
        elif job is Job.OPEN:
            had_close = run.closing
            step = take(
                run,
                trigger,
                session_id=answer if isinstance(answer, str) else None,
                deadline_passed=Job.DEADLINE in done,
            )
            if had_close and run.session_id is None:
                self.closed_before_session = True
        else:
            step = take(run, trigger)
        if step.end is not None:
            if trigger is Trigger.HARD_CEILING:
                STEPS.saw("ended by the hard ceiling")
            self._end(step.end, done)
            return True
        jobs_before = set(run.jobs)
        had_session = run.session_id is not None
        starts = apply_step(run, step)
        if starts.finish is not None:
            assert had_session and Job.FINISH not in jobs_before
            self.finishes.append(starts.finish)
            STEPS.saw(f"finish-now for the {starts.finish.value.replace('_', ' ')}")
        if starts.cancel:
            assert had_session and Job.CANCEL not in jobs_before, "never two cancels in flight"
            reason = "close" if run.closing else "authorization"
            if reason == "close" and "authorization" in self.cancels:
                STEPS.saw("cancel for the close after the authorization cleanup's")
            self.cancels.append(reason)
        if starts.follow is not None:
            assert Job.FOLLOW not in jobs_before and starts.follow.generation == run.generation
        if starts.close_row is not None and run.session_id is None:
            STEPS.saw("closed while opening")
        return True

    def _end(self, ending: Ending, done: set[Job]) -> None:
        """The workflow's `_end`: record the ending, write the outcome, tell the coordinator."""
        run = self.run
        unanswered_open = Job.OPEN in run.jobs and Job.OPEN not in done
        result = end_run(run, ending, done)
        self.endings.append(ending)
        final = finalize(run, ending.kind, ending.explanation.value, result, T0)
        assert final.row.generation == run.generation and final.session_id == run.session_id
        record_outcome(run, final.kind, final.explanation)
        notice = finished_notice(run, T0)
        assert notice.slot_held is unanswered_open
        if notice.slot_held:
            # Only the hard ceiling ends a run whose create is still out (R38).
            assert ending in (
                Ending(OutcomeKind.FAILED, Explanation.NO_START),
                Ending(OutcomeKind.CLOSED, Explanation.CLOSED),
            )
            STEPS.saw("slot held for an unanswered create")
        self.slot_held = notice.slot_held
        self.done.clear()
        self.answers.clear()
        STEPS.saw(f"ended {ending.kind.value}")

    # --- rules ----------------------------------------------------------------------------------------

    @initialize(slot_granted=st.booleans(), first_open=st.sampled_from(["session", "session", "refused", "later"]))
    def admitted(self, slot_granted: bool, first_open: str) -> None:
        """Admitted with its slot or waiting for one; the first create usually answers in the same task."""
        self.run = new_run(start_of(slot_granted=slot_granted))
        self._wake()
        if self.running and first_open != "later":
            self.create_answered(first_open == "session")

    @precondition(lambda self: not self.woken)
    @rule()
    def slot_granted(self) -> None:
        STEPS.steps += 1
        self.run.slot = True
        self._wake()

    @rule(now=st.sampled_from([True, False, False, False]))
    def owner_closes(self, now: bool) -> None:
        """R21-R23: a close may come at any time, and more than once (most helpers are never closed)."""
        STEPS.steps += 1
        self.run.close_requested = self.run.close_requested or now
        self._wake()

    def _wake(self) -> None:
        """The workflow's `run`, as soon as the slot or a close is here: closed before the slot ends at once;
        otherwise the running phase begins."""
        if self.woken or not (self.run.slot or self.run.close_requested):
            return
        self.woken = True
        if self.run.close_requested:
            STEPS.saw("closed before the slot")
            self.closed_before_session = True
            self._end(Ending(OutcomeKind.CLOSED, Explanation.CLOSED), set())
            return
        generation = self.run.generation
        begin_running(self.run)
        self.running = True
        assert self.run.jobs == {Job.OPEN} and self.run.generation == generation + 1
        assert self.run.state is RowState.RUNNING

    @precondition(lambda self: Job.OPEN in self.run.jobs and Job.OPEN not in self.done)
    @rule(session=st.sampled_from([True, True, True, False]))
    def create_answered(self, session: bool) -> None:
        STEPS.steps += 1
        self.done.add(Job.OPEN)
        self.answers[Job.OPEN] = "s-1" if session else None

    @precondition(lambda self: Job.FOLLOW in self.run.jobs and Job.FOLLOW not in self.done)
    @rule(result=ending_results)
    def follow_sees_the_turn_end(self, result: FollowResult) -> None:
        """R11, R16, R24: the turn ended, asked a question, or the session or the core is gone."""
        STEPS.steps += 1
        self.done.add(Job.FOLLOW)
        self.answers[Job.FOLLOW] = result

    @precondition(lambda self: Job.FOLLOW in self.run.jobs and Job.FOLLOW not in self.done)
    @rule(result=going_on_results)
    def follow_sees_a_wait_or_the_work_ceiling(self, result: FollowResult) -> None:
        """R13, R17: an authorization wait or the work ceiling: the helper acts and follows on."""
        STEPS.steps += 1
        self.done.add(Job.FOLLOW)
        self.answers[Job.FOLLOW] = result

    # Rules aimed at endings and starts that a random order of answers reaches only now and then (each helper has one
    # run, and most runs end early): each runs whenever the run is in a state from which its situation can happen,
    # and carries out what leads there as the workflow takes it (the slot, the create's session, the answers, the
    # loop's turns). They share the runs between them, so they start from the wait for the slot on, except the
    # cleanup cancel's ending, which other orders reach as well (the hard ceiling or the turn's end while stopping
    # for an authorization wait): it starts from the create on.

    def _opening(self) -> bool:
        """The create is out, its answer not here yet, and the run is not closing."""
        return Job.OPEN in self.run.jobs and Job.OPEN not in self.done and not self.run.closing

    def _following(self) -> bool:
        """A follow is out, its verdict not here yet, and the run is not closing: a verdict decides."""
        return Job.FOLLOW in self.run.jobs and Job.FOLLOW not in self.done and not self.run.closing

    def _answered(self, job: Job, answer: object) -> None:
        """The job answers, and the loop turns until it takes the answer (a finish-now's, here first, before it)."""
        self.done.add(job)
        self.answers[job] = answer
        for _ in range(3):
            if job not in self.done:
                return
            assert self._turn()
        raise AssertionError(f"the loop never took the {job.value} answer")

    def _follow_on(self) -> None:
        """The run follows its session: the slot comes if it is not here, the create answers with a session, and the
        loop starts the follow."""
        self._slot_comes()
        if self._opening():
            self._answered(Job.OPEN, "s-1")
        assert self._following(), "the session is followed"

    def _on_its_way(self) -> bool:
        """The run waits for its slot, opens or follows its session, and is not closing."""
        return not self.woken or self._opening() or self._following()

    def _may_follow(self) -> bool:
        """The run is on its way and not stopping for an authorization wait."""
        return self._on_its_way() and not self.run.stopping_for_authorization

    def _may_wait_for_authorization(self) -> bool:
        """The run opens or follows its session, is not closing, and is not stopping for an authorization wait yet."""
        return (self._opening() or self._following()) and not self.run.stopping_for_authorization

    def _slot_comes(self) -> None:
        """The slot, if the helper still waits for it."""
        if not self.woken:
            self.run.slot = True  # the slot, as `slot_granted` takes it
            self._wake()

    @precondition(lambda self: not self.woken)
    @rule()
    def owner_closes_before_the_slot(self) -> None:
        """R21: the owner closes a helper still waiting for its slot: it ends closed at once."""
        STEPS.steps += 1
        self.run.close_requested = True  # the owner's close, as `owner_closes` takes it
        self._wake()
        assert self.endings == [Ending(OutcomeKind.CLOSED, Explanation.CLOSED)] and self.closed_before_session

    @precondition(lambda self: not self.woken or self._opening())
    @rule()
    def owner_closes_while_opening(self) -> None:
        """R7, R21: the owner closes while the create is out (the slot comes first if it is not here): the row is
        closed at once, and the cancel waits for the session id (the slot stays held)."""
        STEPS.steps += 1
        self._slot_comes()
        self.run.close_requested = True  # the owner's close, as `owner_closes` takes it
        self._wake()
        for _ in range(3):
            if self.run.closing:
                break
            assert self._turn()
        assert self.run.closing and self.run.session_id is None and Job.CANCEL not in self.run.jobs

    @precondition(_may_follow)
    @rule()
    def follow_sees_a_question(self) -> None:
        """R16: the model asks the owner something: the run ends with the question (the follow stops at pauses)."""
        STEPS.steps += 1
        self._follow_on()
        self._answered(Job.FOLLOW, FollowResult(verdict=Verdict.QUESTION))
        assert self.endings == [Ending(OutcomeKind.QUESTION)]

    @precondition(_may_follow)
    @rule()
    def follow_sees_the_turn_complete(self) -> None:
        """R11: the turn ends completed: so does the run."""
        STEPS.steps += 1
        self._follow_on()
        self._answered(Job.FOLLOW, FollowResult(verdict=Verdict.TERMINAL, status=SessionStatus.COMPLETED))
        assert self.endings == [Ending(OutcomeKind.COMPLETED)]

    @precondition(_on_its_way)
    @rule()
    def follow_sees_the_session_lost(self) -> None:
        """R24: the core no longer knows the session: the run ends interrupted, nothing is replayed."""
        STEPS.steps += 1
        self._follow_on()
        self._answered(Job.FOLLOW, FollowResult(verdict=Verdict.LOST))
        assert self.endings == [Ending(OutcomeKind.INTERRUPTED, Explanation.SESSION_LOST)]

    @precondition(
        lambda self: (
            self.run.finish_reason is None
            and (self._following() or ((not self.woken or self._opening()) and Job.DEADLINE not in self.done))
        )
    )
    @rule()
    def follow_sees_the_work_ceiling(self) -> None:
        """R13: the work counter reaches the ceiling before any finish-now: finish-now is asked for, and the follow
        goes on without watching the ceiling."""
        STEPS.steps += 1
        self._follow_on()
        self._answered(Job.FOLLOW, FollowResult(verdict=Verdict.WORK_CEILING))
        assert self.finishes == [FinishReason.WORK_CEILING] and Job.FOLLOW in self.run.jobs

    def _authorization_wait(self) -> None:
        """R17: an action waits for authorization: without a webhook the run sends the cleanup cancel and follows
        on until the turn stops."""
        self._follow_on()
        self._answered(Job.FOLLOW, FollowResult(verdict=Verdict.AUTHORIZATION, authorization="send the mail"))
        assert self.run.stopping_for_authorization and self.cancels[-1] == "authorization"
        assert {Job.CANCEL, Job.FOLLOW} <= self.run.jobs

    def _cleanup_cancel_sent(self) -> bool:
        """The authorization wait's cleanup cancel was sent, the run is not closing, and no answer that comes
        before a cancel's is here (the follow's)."""
        run = self.run
        return (
            run.stopping_for_authorization
            and not run.closing
            and not self.endings
            and Job.CANCEL not in self.done
            and Job.FOLLOW not in self.done
        )

    @precondition(
        lambda self: self._may_wait_for_authorization() or (self._cleanup_cancel_sent() and Job.CANCEL in self.run.jobs)
    )
    @rule()
    def cleanup_cancel_stops_the_turn(self) -> None:
        """R17: the cleanup cancel of an authorization wait stops the turn: the run ends with the wait."""
        STEPS.steps += 1
        if not self.run.stopping_for_authorization:
            self._authorization_wait()
        self._answered(Job.CANCEL, True)
        assert self.endings == [Ending(OutcomeKind.AUTHORIZATION)]

    @precondition(lambda self: self._may_follow() or self._cleanup_cancel_sent())
    @rule()
    def owner_closes_after_the_cleanup_cancel(self) -> None:
        """R7, R17, R21: the cleanup cancel of an authorization wait is answered without stopping the turn, then
        the owner closes: a second cancel, the close's, goes out, one at a time."""
        STEPS.steps += 1
        if not self.run.stopping_for_authorization:
            self._authorization_wait()
        if Job.CANCEL in self.run.jobs:
            self._answered(Job.CANCEL, False)
        assert not self.endings and Job.CANCEL not in self.run.jobs and "authorization" in self.cancels
        self.run.close_requested = True  # the owner's close, as `owner_closes` takes it
        self._wake()
        for _ in range(3):
            if self.run.closing:
                break
            assert self._turn()
        assert self.run.closing and self.cancels[-2:] == ["authorization", "close"] and Job.CANCEL in self.run.jobs

    @precondition(lambda self: Job.CANCEL in self.run.jobs and Job.CANCEL not in self.done)
    @rule(stopped=st.booleans())
    def cancel_answered(self, stopped: bool) -> None:
        STEPS.steps += 1
        self.done.add(Job.CANCEL)
        self.answers[Job.CANCEL] = stopped

    @precondition(lambda self: Job.FINISH in self.run.jobs and Job.FINISH not in self.done)
    @rule()
    def finish_answered(self) -> None:
        STEPS.steps += 1
        self.done.add(Job.FINISH)

    @precondition(lambda self: self.running and not self.endings and Job.DEADLINE not in self.done)
    @rule(now=st.sampled_from([True, False, False, False, False]))
    def deadline_passes(self, now: bool) -> None:
        """Most helpers end before their deadline."""
        STEPS.steps += 1
        if now:
            self.done.add(Job.DEADLINE)

    @precondition(lambda self: self.run.hard_ceiling_timed and not self.endings)
    @rule(now=st.sampled_from([True, False, False]))
    def hard_ceiling_passes(self, now: bool) -> None:
        """R15, R35: the hard ceiling always ends the run, whatever else is in flight, with no other answer."""
        STEPS.steps += 1
        if not now:
            return
        self.done.add(Job.HARD_CEILING)
        self._drain()
        assert len(self.endings) == 1

    @rule(turns=st.integers(1, 3))
    def loop_turns(self, turns: int) -> None:
        STEPS.steps += 1
        for _ in range(turns):
            if not self._turn():
                return

    def _drain(self) -> None:
        for _ in range(20):
            if not self._turn():
                return
        raise AssertionError("the loop kept finding triggers with no new answer")

    # --- invariants -----------------------------------------------------------------------------------

    @invariant()
    def at_most_one_ending(self) -> None:
        """R19: one outcome per helper."""
        assert len(self.endings) <= 1
        assert (self.run.ending is not None) == bool(self.endings)

    @invariant()
    def finish_now_at_most_once_and_cancels_once_per_reason(self) -> None:
        """R13, R15: one finish-now; R7, R17: one cancel for the close and one for the authorization cleanup."""
        assert len(self.finishes) <= 1
        assert self.cancels.count("close") <= 1 and self.cancels.count("authorization") <= 1
        if self.run.finish_reason is None:
            assert not self.finishes

    @invariant()
    def generation_never_goes_down(self) -> None:
        assert self.run.generation >= self.generation
        self.generation = self.run.generation

    @invariant()
    def a_closed_run_ends_closed(self) -> None:
        """R21: once the close is taken (or came before the slot), the run ends closed, whatever the core did."""
        if self.endings and (self.run.closing or self.closed_before_session):
            assert self.endings[0].kind is OutcomeKind.CLOSED
            assert self.run.state is RowState.CLOSED

    @invariant()
    def nothing_starts_after_the_ending(self) -> None:
        if not self.endings:
            assert self.run.outcome is None
            return
        assert next_trigger(self.run, set(Job)) is None and not self.run.jobs
        everything = Step(close_row=True, cancel=True, finish=FinishReason.DEADLINE, follow=True)
        assert apply_step(self.run.model_copy(deep=True), everything) == Starts()

    @invariant()
    def answers_only_for_jobs_in_flight(self) -> None:
        assert self.done & ACTIVITIES <= self.run.jobs
        if self.run.jobs - {Job.OPEN}:
            assert self.run.session_id is not None

    def teardown(self) -> None:
        """Whatever happened, the hard ceiling ends the run with exactly one outcome."""
        if not self.woken:
            self.slot_granted()
        if not self.endings:
            self.done.add(Job.DEADLINE)
            self._drain()
        if not self.endings:
            assert self.run.hard_ceiling_timed
            self.done.add(Job.HARD_CEILING)
            self._drain()
        assert len(self.endings) == 1 and self.run.outcome is self.endings[0].kind


def start_of(slot_granted: bool) -> HelperStart:
    return helper_start(Policy(), REQUEST, seq=1, limits=Limits(), slot_granted=slot_granted)


def test_helper_run_state_machine() -> None:
    """R7, R13, R15-R21, R35, R38: random orders of answers and events keep every promise of the run."""
    STEPS.steps = 0
    STEPS.seen.clear()
    run_state_machine_as_test(
        HelperRunMachine,
        settings=settings(
            max_examples=500,
            stateful_step_count=50,
            deadline=None,
            # The same runs every time: the coverage check below must not depend on luck.
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    print(f"helper run state machine: {STEPS.steps} steps")
    print("  " + ", ".join(f"{name}: {count}" for name, count in sorted(STEPS.seen.items())))
    assert STEPS.steps >= MIN_TOTAL_STEPS, f"only {STEPS.steps} steps ran"
    missing = [what for what in EXERCISED if STEPS.seen.get(what, 0) == 0]
    assert not missing, f"never exercised: {missing}"
