"""The helper workflow: one background turn from its slot to its one outcome (R7, R9-R25, R35, R38).

It waits for a running slot, opens the core session with a key derived from itself, follows the session
with one long heartbeating activity, keeps the deadline and the hard ceiling on durable timers, writes
exactly one outcome, tells the coordinator (the slot passes on), and resets the session as cleanup.

The run's whole state is one plain record, `domain.run.helper_run.HelperRun`, and every rule of it is a pure
function there; this class keeps the timers, the activity tasks and the I/O. The running phase is
wait -> trigger -> step: every activity (open, follow, finish-now, cancel, closing the row) runs as a task
beside the timers, the loop waits until `next_trigger` names one, `take` records its answer and looks the
step up in the table (`domain.run.ending.decide`), and `apply_step` says what to start. The hard ceiling's
timer ends the loop, so no await of the running phase outlives it (R35).

Every wait, with its bound:
- the slot: granted by the coordinator in admission order; every slot ahead comes back by its holder's
  hard ceiling plus the coordinator's lease margin (`domain.book.LEASE_MARGIN`);
- the running phase: the hard ceiling (deadline + grace);
- the outcome's write: a store write, retried until the store is back (`options.STORE_WRITE`);
- the search for a session whose create was never answered: `options.RECOVERY_BUDGET` (R38);
- the finished notice: one signal, answered by the server;
- the reset (cleanup, after the outcome and the notice): `options.RESET_BUDGET`, then the session is parked;
- cancelled activities confirming before the workflow completes: `SETTLE_WAIT`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.rows import RowActivities
    from activities.session import SessionActivities
    from domain.messages.activities import (
        CancelResult,
        Finalize,
        FollowResult,
        MarkClosed,
        OpenedSession,
        OpenSession,
        ParkSession,
        RecoverSession,
        RowKey,
        Verdict,
    )
    from domain.messages.signals import Token
    from domain.messages.workflows import HelperResult, HelperStart
    from domain.outcome import OutcomeKind
    from domain.rows import RowState
    from domain.run.ending import Ending, Explanation, Step, Trigger
    from domain.run.ending_texts import explain
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
        row_closed,
        row_key,
        session_ref,
        take,
    )
    from protocol.errors import ErrorType
    from protocol.names import (
        CLOSE,
        HELPER_OUTCOME,
        HELPER_STATE,
        HELPER_STATUS,
        HELPER_WORKFLOW,
        SLOT_GRANTED,
        follows_task_queue,
    )
    from protocol.signal_senders import tell_closed, tell_finished
    from workflows import options
    from workflows.failures import CALL_FAILED, cause_of, failed_for_good

DEADLINE_SUMMARY = "deadline: ask for a partial outcome"
HARD_CEILING_SUMMARY = "hard ceiling: deadline + grace"
# After the outcome, cancelled activities get this long to confirm, so the workflow never completes while
# one of their results is on its way (that would fail the completing task with UnhandledCommand).
SETTLE_WAIT = timedelta(seconds=60)
# The reason shown at the top of the helper's page in the Web UI.
DETAILS_REASON_MAX = 600

_Task = TypeVar("_Task", bound=asyncio.Future[Any])


@workflow.defn(name=HELPER_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class HelperWorkflow:
    @workflow.init
    def __init__(self, start: HelperStart) -> None:
        self.start = start
        self.record = new_run(start)
        self._jobs: dict[Job, asyncio.Future[Any]] = {}  # the activities of `record.jobs`, by job
        self._started: list[asyncio.Future[Any]] = []

    # --- messages ---------------------------------------------------------------------------------------

    @workflow.signal(name=SLOT_GRANTED)
    def slot_granted(self, token: Token | None = None) -> None:
        if self._signed(token, SLOT_GRANTED):
            self.record.slot = True

    @workflow.signal(name=CLOSE)
    def close(self, token: Token | None = None) -> None:
        if self._signed(token, CLOSE):
            self.record.close_requested = True

    def _signed(self, token: Token | None, signal: str) -> bool:
        """A signal without its token comes from a client without the codec keys (R39): it is ignored."""
        if token is None:
            workflow.logger.warning("%s: a %s signal without its token was ignored", self.start.helper_id, signal)
        return token is not None

    @workflow.query(name=HELPER_STATUS)
    def status(self) -> dict[str, str | None]:
        run = self.record
        return {
            "state": run.state.value,
            "session_id": run.session_id,
            "outcome": run.outcome.value if run.outcome else None,
        }

    # --- the run ----------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: HelperStart) -> HelperResult:
        workflow.set_current_details(f"waiting for a running slot · {start.title}")
        await workflow.wait_condition(lambda: self.record.slot or self.record.close_requested)
        if self.record.close_requested:
            kind = await self._end(Ending(OutcomeKind.CLOSED, Explanation.CLOSED), set())
        else:
            kind = await self._run_session(start)
        await self._settle()
        # The outcome is final and stored; the workflow's status and result only show it in the Web UI.
        explanation = self.record.explanation
        result = HelperResult(outcome=kind, reason=explanation)
        if kind is OutcomeKind.FAILED:
            raise ApplicationError(
                explanation or "the helper failed", result, type=ErrorType.HELPER_FAILED, non_retryable=True
            )
        return result

    # --- the running phase: wait -> trigger -> step -----------------------------------------------------

    async def _run_session(self, start: HelperStart) -> OutcomeKind:
        limits = start.limits
        started_at = workflow.now()
        deadline_at = started_at + timedelta(milliseconds=limits.deadline_ms)
        hard_at = limits.hard_ceiling_at(deadline_at)
        if begin_running(self.record):
            workflow.upsert_search_attributes([HELPER_STATE.value_set(RowState.RUNNING.value)])
        workflow.set_current_details(
            f"running · deadline {deadline_at:%H:%M:%S} UTC · hard ceiling {hard_at:%H:%M:%S} UTC · {start.title}"
        )
        opening = OpenSession(
            row=row_key(self.record),
            idempotency_key=self._idempotency_key(),
            limits=limits,
            started_at=started_at,
            deadline_at=deadline_at,
            check_ms=start.check_ms,
        )
        self._jobs[Job.OPEN] = self._track(await self._open_in_task(opening))
        # The open's first attempt held this task for part of the time (workflow.now() has moved on with it):
        # the timers get what is left.
        timers = {Job.DEADLINE: _timer(deadline_at, DEADLINE_SUMMARY)}
        try:
            while True:
                await workflow.wait_condition(lambda: next_trigger(self.record, self._done(timers)) is not None)
                done = self._done(timers)
                trigger = next_trigger(self.record, done)
                assert trigger is not None
                step = await self._take(trigger, timers[Job.DEADLINE])
                if step.end is not None:
                    return await self._end(step.end, done)
                starts = apply_step(self.record, step)
                if starts.hard_ceiling_timer:
                    timers[Job.HARD_CEILING] = _timer(hard_at, HARD_CEILING_SUMMARY)
                self._start(starts)
        finally:
            for timer in timers.values():
                timer.cancel()

    def _done(self, timers: dict[Job, asyncio.Future[None]]) -> set[Job]:
        return {job for jobs in (self._jobs, timers) for job, task in jobs.items() if task.done()}

    async def _take(self, trigger: Trigger, deadline: asyncio.Future[None]) -> Step:
        """Take the trigger's answer (each answer is taken once) and ask the run what it means."""
        run = self.record
        match trigger:
            case Trigger.FOLLOW:
                return take(run, trigger, follow=await self._take_follow())
            case Trigger.CANCEL_ANSWERED:
                return take(run, trigger, stopped=await self._take_cancel())
            case Trigger.OPENED:
                opened = await self._take_opening()
                session_id = opened.session_id if opened is not None else None
                return take(run, trigger, session_id=session_id, deadline_passed=deadline.done())
            case Trigger.FINISH_ANSWERED:
                await self._take_finish()
        return take(run, trigger)

    def _start(self, starts: Starts) -> None:
        """Start what the step asks for, in its order."""
        run, check_ms = self.record, self.start.check_ms
        if starts.close_row is not None:
            self._track(asyncio.ensure_future(self._close_row(starts.close_row)))
        if starts.finish is not None:
            self._jobs[Job.FINISH] = self._track(
                workflow.start_activity_method(
                    SessionActivities.finish_session,
                    session_ref(run),
                    summary=f"finish now ({starts.finish.value})",
                    **options.core_call(check_ms, give_up_after=timedelta(minutes=1), cancellable=True),
                )
            )
        if starts.cancel:
            reason = "closed by the owner" if run.closing else "cleanup cancel of an authorization wait"
            self._jobs[Job.CANCEL] = self._track(
                workflow.start_activity_method(
                    SessionActivities.cancel_session,
                    session_ref(run),
                    summary=f"cancel: {reason}",
                    **options.cancel(check_ms),
                )
            )
        if starts.follow is not None:
            self._jobs[Job.FOLLOW] = self._track(
                workflow.start_activity_method(
                    SessionActivities.follow_session,
                    starts.follow,
                    # Its own queue and slots: a follow holds its slot for the whole run (protocol.names).
                    task_queue=follows_task_queue(workflow.info().task_queue),
                    summary=f"follow session {run.session_id}: its steps and work tokens in the helper's row",
                    **options.follow(check_ms, self.start.follow),
                )
            )

    # --- opening and following --------------------------------------------------------------------------

    async def _open_in_task(self, opening: OpenSession) -> asyncio.Future[OpenedSession]:
        """The open's first attempt, as a local activity in this task, bounded by `options.first_open`; a create
        that fails or outlasts it goes on as an activity under the same key (a second create returns the same
        session, R9), retried until the hard ceiling. Returns the open, answered or under way.

        Measured goal: worker CPU per quick helper within ×3 of a bare workflow (one workflow task and one
        activity task fewer for the usual quick create)."""
        answered: asyncio.Future[OpenedSession] = asyncio.get_running_loop().create_future()
        try:
            answered.set_result(
                await workflow.execute_local_activity_method(
                    SessionActivities.open_session,
                    opening,
                    **options.first_open(self.start.check_ms),
                )
            )
        except CALL_FAILED as error:
            if not failed_for_good(error):
                workflow.logger.info(
                    "first open of %s failed, going on as an activity: %s", self.start.helper_id, cause_of(error)
                )
                return workflow.start_activity_method(
                    SessionActivities.open_session,
                    opening,
                    summary="create the core session (idempotent key)",
                    **options.core_call(self.start.check_ms, cancellable=True),
                )
            answered.set_exception(error)
        return answered

    # --- taking answers ---------------------------------------------------------------------------------

    async def _take_opening(self) -> OpenedSession | None:
        try:
            opened: OpenedSession = await self._jobs.pop(Job.OPEN)
            return opened
        except CALL_FAILED as error:  # the first attempt is a local activity
            # Refused by the core, or the row is gone: no session was made.
            workflow.logger.warning("open of %s failed: %s", self.start.helper_id, cause_of(error))
            return None

    async def _take_follow(self) -> FollowResult:
        try:
            result: FollowResult = await self._jobs.pop(Job.FOLLOW)
            return result
        except ActivityError as error:
            return FollowResult(verdict=Verdict.CORE_FAILED, error=cause_of(error))

    async def _take_cancel(self) -> bool:
        """Whether the core confirmed the stop."""
        session_id = self.record.session_id
        try:
            answer: CancelResult = await self._jobs.pop(Job.CANCEL)
        except ActivityError as error:
            answer = CancelResult(stopped=False, detail=cause_of(error))
        if answer.stopped:
            workflow.logger.info("%s: the core confirmed session %s stopped", self.start.helper_id, session_id)
        else:
            # The follow goes on: the turn's end or the hard ceiling frees the slot, never this answer (R7).
            workflow.logger.info(
                "%s: cancel of session %s not confirmed (%s)", self.start.helper_id, session_id, answer.detail
            )
        return answer.stopped

    async def _take_finish(self) -> None:
        try:
            await self._jobs.pop(Job.FINISH)
        except ActivityError as error:
            # The follow goes on; if the core never finishes, the hard ceiling still holds (R15).
            workflow.logger.warning("finish-now for %s failed: %s", self.start.helper_id, cause_of(error))

    async def _close_row(self, row: RowKey) -> None:
        """Close the row at once (R21), then let the coordinator answer the owner's close."""
        await workflow.execute_local_activity_method(
            RowActivities.mark_closed, MarkClosed(row=row), **options.STORE_WRITE
        )
        row_closed(self.record)
        await self._tell_coordinator(tell_closed(self.start.owner, self.start.helper_id))

    # --- the ending: write the outcome, tell the coordinator, reset the session ------------------------

    async def _end(self, ending: Ending, done: set[Job]) -> OutcomeKind:
        """Stop everything still in flight, write the one outcome (R19), pass the slot on (R8), clean up (R20)."""
        record, start = self.record, self.start
        result = end_run(record, ending, done)
        for job in Job:
            task = self._jobs.pop(job, None)
            if task is not None and not task.done():
                task.cancel()
                task.add_done_callback(_outcome_taken)
        explanation = explain(ending.explanation, start.language, start.limits, start.follow.silence_ms)
        finished_at = workflow.now()
        kind = await self._write_outcome(finalize(record, ending.kind, explanation, result, finished_at))
        notice = finished_notice(record, finished_at, result)
        if notice.slot_held:
            # The create was never answered, so a session may run under our key. The outcome is the owner's now
            # and the helper no longer counts as open, but it keeps its slot until that session is found and
            # stopped, so an owner never has more running sessions than slots (R38).
            await self._tell_coordinator(tell_finished(start.owner, notice))
            await self._recover_lost_session()
            freed = notice.model_copy(update={"slot_held": False})
            await self._tell_coordinator(tell_finished(start.owner, freed))
        elif record.session_id is not None:
            # The notice frees the slot at once; the reset is cleanup and runs beside it (R8, R20).
            await asyncio.gather(self._tell_coordinator(tell_finished(start.owner, notice)), self._reset(kind))
        else:
            await self._tell_coordinator(tell_finished(start.owner, notice))
        return kind

    async def _write_outcome(self, final: Finalize) -> OutcomeKind:
        """Write the outcome and return the one the row holds: the store never changes a final outcome, so a
        write run again after a lost workflow task finds the first one, and the workflow ends with it (R19)."""
        finalized = await workflow.execute_local_activity_method(
            RowActivities.finalize_outcome, final, summary="write the outcome", **options.STORE_WRITE
        )
        already = finalized.already
        kind, explanation = (
            (already.kind, already.explanation) if already is not None else (final.kind, final.explanation)
        )
        record_outcome(self.record, kind, explanation)
        workflow.upsert_search_attributes(
            [HELPER_STATE.value_set(self.record.state.value), HELPER_OUTCOME.value_set(kind.value)]
        )
        reason = f": {explanation[:DETAILS_REASON_MAX]}" if explanation else ""
        workflow.set_current_details(f"**{kind.value}**{reason}\n\n{self.start.title}")
        return kind

    async def _reset(self, kind: OutcomeKind) -> None:
        """Cleanup (R20): the reset is retried with backoff for `options.RESET_BUDGET`, so a core that fails some
        of its calls still gets it; a reset that never succeeds parks the session, which the hourly sweep tries
        again. Neither changes the outcome or the slot."""
        ref = session_ref(self.record).model_copy(update={"outcome_kind": kind})
        try:
            await workflow.execute_activity_method(
                SessionActivities.reset_session,
                ref,
                summary="reset the session (cleanup)",
                **options.reset(self.start.check_ms),
            )
            return
        except ActivityError as error:
            failure = cause_of(error)
        workflow.logger.warning("reset of session %s failed for %s, parking it: %s", ref.session_id, kind, failure)
        await workflow.execute_local_activity_method(
            SessionActivities.park_session,
            ParkSession(owner=ref.owner, helper_id=ref.helper_id, session_id=ref.session_id, error=failure),
            summary="park the session",
            **options.STORE_WRITE,
        )

    async def _recover_lost_session(self) -> None:
        try:
            recovered = await workflow.execute_activity_method(
                SessionActivities.recover_session,
                RecoverSession(
                    row=row_key(self.record),
                    idempotency_key=self._idempotency_key(),
                    limits=self.start.limits,
                    check_ms=self.start.check_ms,
                ),
                summary="find the session whose create was never answered, cancel and reset it",
                **options.recovery(self.start.check_ms),
            )
        except ActivityError as error:
            workflow.logger.error(
                "could not learn whether %s has a session (key %s): %s",
                self.start.helper_id,
                self._idempotency_key(),
                cause_of(error),
            )
            return
        if recovered.session_id is None:
            workflow.logger.info("%s: the unanswered create made no session", self.start.helper_id)
        elif recovered.stopped:
            workflow.logger.warning(
                "%s: the unanswered create had made session %s; the core confirmed it stopped",
                self.start.helper_id,
                recovered.session_id,
            )
        else:
            workflow.logger.error(
                "%s: the unanswered create had made session %s; the core did not confirm it stopped (%s)",
                self.start.helper_id,
                recovered.session_id,
                recovered.detail,
            )

    async def _settle(self) -> None:
        """Wait (bounded) until every activity this run started has ended, so completing is the last event."""
        if not all(task.done() for task in self._started):
            try:
                await workflow.wait_condition(
                    lambda: all(task.done() for task in self._started),
                    timeout=SETTLE_WAIT,
                    timeout_summary="let cancelled activities confirm",
                )
            except TimeoutError:
                workflow.logger.warning("%s: activities still unconfirmed at completion", self.start.helper_id)
        for task in self._started:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved, so asyncio does not warn about it

    async def _tell_coordinator(self, sending: Coroutine[Any, Any, None]) -> None:
        try:
            await sending
        except ApplicationError as error:
            # Only an operator can remove a coordinator; the outcome is final and in the store anyway,
            # and the slot lease of a new coordinator cannot include this helper.
            workflow.logger.error("could not tell the coordinator of %s: %s", self.start.owner, error)

    # --- small helpers ----------------------------------------------------------------------------------

    def _track(self, task: _Task) -> _Task:
        self._started.append(task)
        return task

    def _idempotency_key(self) -> str:
        # Stable across retries and worker restarts, distinct for a helper id reused after retention (R9).
        info = workflow.info()
        return f"{info.workflow_id}/{info.first_execution_run_id}"


def _outcome_taken(task: asyncio.Future[Any]) -> None:
    """A job cancelled at the ending ends with its activity's cancellation, which nothing awaits: taken here, so that
    asyncio does not report it as an exception never retrieved."""
    if not task.cancelled():
        task.exception()


def _timer(at: datetime, summary: str) -> asyncio.Future[None]:
    """A durable timer to `at`: it fires after worker and server restarts too (R15, R25); a moment already
    passed fires at once."""
    return asyncio.ensure_future(workflow.sleep(max(at - workflow.now(), timedelta(milliseconds=1)), summary=summary))
