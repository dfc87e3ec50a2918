"""The helper workflow: one background turn from its slot to its one outcome (R7, R9-R25, R35, R38).

It waits for a running slot, opens the core session with a key derived from itself, follows the session
with one long heartbeating activity, keeps the deadline and the hard ceiling on durable timers, writes
exactly one outcome, tells the coordinator (the slot passes on), and resets the session as cleanup.

The running phase is wait -> trigger -> step: every activity (open, follow, finish-now, cancel, closing
the row) runs as a task beside the timers, the loop waits for the first trigger, and the pure table
`domain.ending.decide` says what to do. The hard ceiling's timer ends the loop, so no await of the
running phase outlives it (R35).

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
    from domain.activity_io import (
        CancelResult,
        Finalize,
        HelperStart,
        MarkClosed,
        OpenedSession,
        OpenSession,
        ParkSession,
        RecoverSession,
        RowKey,
        SessionRef,
    )
    from domain.book import FinishedNotice
    from domain.ending import (
        Ending,
        Explanation,
        FinishReason,
        Phase,
        Situation,
        Step,
        Trigger,
        decide,
        row_state_of,
    )
    from domain.ending_texts import explain
    from domain.follow import FollowRequest, FollowResult, Verdict
    from domain.limits import kept_until
    from domain.outcome import OutcomeKind
    from domain.rows import RowState
    from protocol.errors import ErrorType
    from protocol.messages import CLOSE, HELPER_STATUS, HELPER_WORKFLOW, SLOT_GRANTED, HelperResult, Token
    from protocol.names import HELPER_OUTCOME, HELPER_STATE, follows_task_queue
    from protocol.senders import tell_closed, tell_finished
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
        self.slot = start.slot_granted
        self.close_requested = False
        self.generation = 1  # the coordinator wrote the admitted row at generation 1
        self.session_id: str | None = None
        self.state = RowState.RUNNING if start.slot_granted else RowState.WAITING
        self.finish_reason: FinishReason | None = None  # set once finish-now was asked
        self.outcome: OutcomeKind | None = None
        self.explanation = ""  # the outcome's owner-facing reason, once final
        self.closing = False  # closed by the owner while running; the slot waits for the core's stop (R7)
        self.stopping_for_authorization = False
        self.deadline_seen = False
        self.open_unanswered = False  # the create may have made a session whose id never came back (R38)
        self.last_result: FollowResult | None = None
        self.authorization_result: FollowResult | None = None
        self._opening: asyncio.Future[OpenedSession] | None = None
        self._follow_task: asyncio.Future[FollowResult] | None = None
        self._followed = False  # a follow activity was scheduled (its first records when following began)
        self._finish: asyncio.Task[bool] | None = None
        self._cancel: asyncio.Task[CancelResult] | None = None
        self._started: list[asyncio.Future[Any]] = []

    # --- messages ---------------------------------------------------------------------------------------

    @workflow.signal(name=SLOT_GRANTED)
    def slot_granted(self, token: Token | None = None) -> None:
        if self._signed(token, SLOT_GRANTED):
            self.slot = True

    @workflow.signal(name=CLOSE)
    def close(self, token: Token | None = None) -> None:
        if self._signed(token, CLOSE):
            self.close_requested = True

    def _signed(self, token: Token | None, signal: str) -> bool:
        """A signal without its token comes from a client without the codec keys (R39): it is ignored."""
        if token is None:
            workflow.logger.warning("%s: a %s signal without its token was ignored", self.start.helper_id, signal)
        return token is not None

    @workflow.query(name=HELPER_STATUS)
    def status(self) -> dict[str, str | None]:
        return {
            "state": self.state.value,
            "session_id": self.session_id,
            "outcome": self.outcome.value if self.outcome else None,
        }

    # --- the run ----------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: HelperStart) -> HelperResult:
        workflow.set_current_details(f"waiting for a running slot · {start.title}")
        await workflow.wait_condition(lambda: self.slot or self.close_requested)
        if self.close_requested:
            kind = await self._end(Ending(OutcomeKind.CLOSED, Explanation.CLOSED))
        else:
            kind = await self._run_session(start)
        await self._settle()
        # The outcome is final and stored; the workflow's status and result only show it in the Web UI.
        result = HelperResult(outcome=kind, reason=self.explanation)
        if kind is OutcomeKind.FAILED:
            raise ApplicationError(
                self.explanation or "the helper failed", result, type=ErrorType.HELPER_FAILED, non_retryable=True
            )
        return result

    # --- the running phase: wait -> trigger -> step -----------------------------------------------------

    async def _run_session(self, start: HelperStart) -> OutcomeKind:
        limits = start.limits
        started_at = workflow.now()
        deadline_at = started_at + timedelta(milliseconds=limits.deadline_ms)
        hard_at = started_at + timedelta(milliseconds=limits.hard_ceiling_ms)
        if self.state is not RowState.RUNNING:  # a helper that started with its slot already shows running
            workflow.upsert_search_attributes([HELPER_STATE.value_set(RowState.RUNNING.value)])
        self.state = RowState.RUNNING
        workflow.set_current_details(
            f"running · deadline {deadline_at:%H:%M:%S} UTC · hard ceiling {hard_at:%H:%M:%S} UTC · {start.title}"
        )
        self.generation += 1
        opening = OpenSession(
            row=self._row_key(),
            idempotency_key=self._idempotency_key(),
            limits=limits,
            started_at=started_at,
            deadline_at=deadline_at,
            check_ms=start.check_ms,
        )
        self._opening = self._track(await self._open_in_task(opening))
        # The open's first attempt held this task for part of the time (workflow.now() has moved on with it):
        # the timers get what is left. The hard ceiling's timer starts once the deadline has passed, so most
        # helpers, which end before the deadline, cost one timer.
        deadline = _timer(deadline_at, DEADLINE_SUMMARY)
        timers = {"deadline": deadline, "hard": asyncio.get_running_loop().create_future()}
        try:
            while True:
                await workflow.wait_condition(
                    lambda: self._finish_answered() or self._next_trigger(deadline, timers["hard"]) is not None
                )
                if self._finish_answered():
                    await self._take_finish()
                    continue
                trigger = self._next_trigger(deadline, timers["hard"])
                assert trigger is not None
                step = await self._decide(trigger, deadline)
                if step.end is not None:
                    return await self._end(step.end)
                if trigger is Trigger.DEADLINE:
                    timers["hard"] = _timer(hard_at, HARD_CEILING_SUMMARY)
                self._apply(step)
        finally:
            for timer in timers.values():
                timer.cancel()

    def _next_trigger(self, deadline: asyncio.Future[None], hard: asyncio.Future[None]) -> Trigger | None:
        # An answer already here wins over the ceiling: a core that finished is reported as finished.
        if self._follow_task is not None and self._follow_task.done():
            return Trigger.FOLLOW
        if self._cancel is not None and self._cancel.done():
            return Trigger.CANCEL_ANSWERED
        if self._opening is not None and self._opening.done():
            return Trigger.OPENED
        if hard.done():
            return Trigger.HARD_CEILING
        if self.close_requested and not self.closing:
            return Trigger.CLOSE
        if deadline.done() and not self.deadline_seen:
            return Trigger.DEADLINE
        return None

    async def _decide(self, trigger: Trigger, deadline: asyncio.Future[None]) -> Step:
        """Take the trigger's result (each result is taken once) and look the step up in the table."""
        situation = self._situation()
        if trigger is Trigger.FOLLOW:
            result = await self._take_follow()
            self.last_result = result
            if result.verdict is Verdict.AUTHORIZATION:
                self.authorization_result = result
            return decide(trigger, situation, verdict=result.verdict, status=result.status, silent=result.silent)
        if trigger is Trigger.CANCEL_ANSWERED:
            answer = await self._take_cancel()
            return decide(trigger, situation, stopped=answer.stopped)
        if trigger is Trigger.OPENED:
            opened = await self._take_opening()
            if opened is None:
                return decide(Trigger.OPEN_FAILED, situation)
            self.session_id = opened.session_id
            return decide(trigger, self._situation(), deadline_passed=deadline.done())
        if trigger is Trigger.DEADLINE:
            self.deadline_seen = True
        return decide(trigger, situation)

    def _apply(self, step: Step) -> None:
        if step.close_row:
            self.closing = True
            self._track(asyncio.ensure_future(self._close_row()))
        if step.stopping_for_authorization:
            self.stopping_for_authorization = True
        if step.finish is not None and self.finish_reason is None and self.session_id is not None:
            self.finish_reason = step.finish
            self._finish = self._track(
                workflow.start_activity_method(
                    SessionActivities.finish_session,
                    self._session_ref(),
                    summary=f"finish now ({step.finish.value})",
                    **options.core_call(self.start.check_ms, give_up_after=timedelta(minutes=1), cancellable=True),
                )
            )
        if step.cancel and self._cancel is None and self.session_id is not None:
            reason = "closed by the owner" if self.closing else "cleanup cancel of an authorization wait"
            self._cancel = self._track(
                workflow.start_activity_method(
                    SessionActivities.cancel_session,
                    self._session_ref(),
                    summary=f"cancel: {reason}",
                    **options.core_call(self.start.check_ms, cancellable=True),
                )
            )
        if step.follow:
            self._follow_task = self._start_follow(step.watch_work_ceiling, step.stop_at_pauses)

    def _finish_answered(self) -> bool:
        return self._finish is not None and self._finish.done()

    def _situation(self) -> Situation:
        return Situation(
            phase=Phase.FOLLOWING if self.session_id is not None else Phase.OPENING,
            closing=self.closing,
            finish_asked=self.finish_reason,
            stopping_for_authorization=self.stopping_for_authorization,
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

    def _start_follow(self, watch_work_ceiling: bool, stop_at_pauses: bool) -> asyncio.Task[FollowResult]:
        assert self.session_id is not None
        start = self.start
        records_start, self._followed = not self._followed, True
        return self._track(
            workflow.start_activity_method(
                SessionActivities.follow_session,
                FollowRequest(
                    owner=start.owner,
                    helper_id=start.helper_id,
                    seq=start.seq,
                    session_id=self.session_id,
                    generation=self.generation,
                    ceiling_tokens=start.limits.ceiling_tokens,
                    watch_work_ceiling=watch_work_ceiling,
                    stop_at_pauses=stop_at_pauses,
                    tuning=start.follow,
                    check_ms=start.check_ms,
                    records_start=records_start,
                ),
                # Its own queue and slots: a follow holds its slot for the whole run (protocol.names).
                task_queue=follows_task_queue(workflow.info().task_queue),
                summary=f"follow session {self.session_id}: live steps and work tokens in the heartbeat details",
                **options.follow(start.check_ms, start.follow, cancellable=True),
            )
        )

    # --- taking results ---------------------------------------------------------------------------------

    async def _take_opening(self) -> OpenedSession | None:
        opening, self._opening = self._opening, None
        assert opening is not None
        try:
            return await opening
        except CALL_FAILED as error:  # the first attempt is a local activity
            # Refused by the core, or the row is gone: no session was made.
            workflow.logger.warning("open of %s failed: %s", self.start.helper_id, cause_of(error))
            return None

    async def _take_follow(self) -> FollowResult:
        follow, self._follow_task = self._follow_task, None
        assert follow is not None
        try:
            return await follow
        except ActivityError as error:
            return FollowResult(verdict=Verdict.CORE_FAILED, error=cause_of(error))

    async def _take_cancel(self) -> CancelResult:
        cancel, self._cancel = self._cancel, None
        assert cancel is not None
        try:
            answer = await cancel
        except ActivityError as error:
            answer = CancelResult(stopped=False, reachable=False, detail=cause_of(error))
        if answer.stopped:
            workflow.logger.info("%s: the core confirmed session %s stopped", self.start.helper_id, self.session_id)
        else:
            # The follow goes on: the turn's end or the hard ceiling frees the slot, never this answer (R7).
            workflow.logger.info(
                "%s: cancel of session %s not confirmed (%s)", self.start.helper_id, self.session_id, answer.detail
            )
        return answer

    async def _take_finish(self) -> None:
        finish, self._finish = self._finish, None
        assert finish is not None
        try:
            await finish
        except ActivityError as error:
            # The follow goes on; if the core never finishes, the hard ceiling still holds (R15).
            workflow.logger.warning("finish-now for %s failed: %s", self.start.helper_id, cause_of(error))

    async def _close_row(self) -> None:
        """Close the row at once (R21), then let the coordinator answer the owner's close."""
        self.generation += 1
        await workflow.execute_local_activity_method(
            RowActivities.mark_closed, MarkClosed(row=self._row_key()), **options.STORE_WRITE
        )
        if self.outcome is None:
            self.state = RowState.CLOSED
        await self._tell_coordinator(tell_closed(self.start.owner, self.start.helper_id))

    # --- the ending: write the outcome, tell the coordinator, reset the session ------------------------

    async def _end(self, ending: Ending) -> OutcomeKind:
        """Stop everything still in flight, write the one outcome (R19), pass the slot on (R8), clean up (R20)."""
        if self._opening is not None and not self._opening.done():
            self.open_unanswered = True
        for task in (self._opening, self._follow_task, self._finish, self._cancel):
            if task is not None and not task.done():
                task.cancel()
        start = self.start
        result = self.last_result
        if ending.kind is OutcomeKind.AUTHORIZATION and self.authorization_result is not None:
            result = self.authorization_result.model_copy(
                update={"actions": (result or self.authorization_result).actions}
            )
        explanation = explain(ending.explanation, start.language, start.limits, start.follow.silence_ms)
        finished_at = workflow.now()
        kind = await self._write_outcome(ending.kind, explanation, result, finished_at)
        notice = FinishedNotice(
            helper_id=start.helper_id,
            seq=start.seq,
            kind=kind,
            generation=self.generation,
            finished_at=finished_at,
            slot_held=self.open_unanswered,
        )
        if self.open_unanswered:
            # The create was never answered, so a session may run under our key. The outcome is the owner's now
            # and the helper no longer counts as open, but it keeps its slot until that session is found and
            # stopped, so an owner never has more running sessions than slots (R38).
            await self._tell_coordinator(tell_finished(start.owner, notice))
            await self._recover_lost_session()
            freed = notice.model_copy(update={"slot_held": False})
            await self._tell_coordinator(tell_finished(start.owner, freed))
        elif self.session_id is not None:
            # The notice frees the slot at once; the reset is cleanup and runs beside it (R8, R20).
            await asyncio.gather(self._tell_coordinator(tell_finished(start.owner, notice)), self._reset(kind))
        else:
            await self._tell_coordinator(tell_finished(start.owner, notice))
        return kind

    async def _write_outcome(
        self, kind: OutcomeKind, explanation: str, result: FollowResult | None, finished_at: datetime
    ) -> OutcomeKind:
        """Write the outcome and return the one the row holds: the store never changes a final outcome, so a
        write run again after a lost workflow task finds the first one, and the workflow ends with it (R19)."""
        start = self.start
        state = row_state_of(kind)
        self.generation += 1
        final = Finalize(
            row=self._row_key(),
            kind=kind,
            state=state,
            language=start.language,
            model=start.model,
            explanation=explanation,
            session_id=self.session_id,
            question=result.question if result and kind is OutcomeKind.QUESTION else None,
            authorization=result.authorization if result and kind is OutcomeKind.AUTHORIZATION else None,
            actions=result.actions if result else [],
            actions_total=result.actions_total if result else 0,
            refusals=result.refusals if result else [],
            usage=result.usage if result and result.usage.steps else None,
            summary_max=start.summary_max,
            finished_at=finished_at,
            keep_until=(
                kept_until(finished_at, start.keep_ms)
                if state is RowState.CLOSED and start.keep_ms is not None
                else None
            ),
        )
        finalized = await workflow.execute_local_activity_method(
            RowActivities.finalize_outcome, final, summary="write the outcome", **options.STORE_WRITE
        )
        if finalized.already is not None:
            kind, explanation = finalized.already.kind, finalized.already.explanation
            state = row_state_of(kind)
        self.outcome = kind
        self.explanation = explanation
        self.state = state
        workflow.upsert_search_attributes([HELPER_STATE.value_set(state.value), HELPER_OUTCOME.value_set(kind.value)])
        reason = f": {explanation[:DETAILS_REASON_MAX]}" if explanation else ""
        workflow.set_current_details(f"**{kind.value}**{reason}\n\n{start.title}")
        return kind

    async def _reset(self, kind: OutcomeKind) -> None:
        """Cleanup (R20): the reset is retried with backoff for `options.RESET_BUDGET`, so a core that fails some
        of its calls still gets it; a reset that never succeeds parks the session, which the hourly sweep tries
        again. Neither changes the outcome or the slot."""
        ref = self._session_ref().model_copy(update={"outcome_kind": kind})
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
                    row=self._row_key(),
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

    def _row_key(self) -> RowKey:
        start = self.start
        return RowKey(owner=start.owner, helper_id=start.helper_id, seq=start.seq, generation=self.generation)

    def _session_ref(self) -> SessionRef:
        assert self.session_id is not None
        return SessionRef(
            owner=self.start.owner,
            helper_id=self.start.helper_id,
            session_id=self.session_id,
            check_ms=self.start.check_ms,
        )

    def _idempotency_key(self) -> str:
        # Stable across retries and worker restarts, distinct for a helper id reused after retention (R9).
        info = workflow.info()
        return f"{info.workflow_id}/{info.first_execution_run_id}"


def _timer(at: datetime, summary: str) -> asyncio.Future[None]:
    """A durable timer to `at`: it fires after worker and server restarts too (R15, R25); a moment already
    passed fires at once."""
    return asyncio.ensure_future(workflow.sleep(max(at - workflow.now(), timedelta(milliseconds=1)), summary=summary))
