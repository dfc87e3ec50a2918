"""The helper workflow: one background turn from its slot to its one outcome (R7, R9-R25, R35, R38).

It waits for a running slot, opens the core session with a key derived from itself, follows the session
with one long heartbeating activity, keeps the deadline and the hard ceiling on durable timers, finalizes
exactly one outcome, hands the row and the slot back to the coordinator, and resets the session as
cleanup.

The running phase is wait -> trigger -> step: every activity (open, follow, finish-now, cancel, closing
the row) runs as a task beside the timers, the loop waits for the first trigger, and
`domain.ending.decide` says what to do. No await in the running phase can outlive the hard ceiling.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.rows import RowActivities
    from activities.session import SessionActivities
    from domain.activity_io import (
        CancelResult,
        HelperStart,
        MarkClosed,
        OpenedSession,
        OpenSession,
        RowKey,
        SessionRef,
    )
    from domain.ending import Ending, Explanation, FinishReason, Phase, Situation, Step, Trigger, decide
    from domain.follow import FollowResult, Verdict
    from domain.outcome import OutcomeKind
    from domain.rows import RowState
    from protocol.errors import ErrorType
    from protocol.messages import (
        CLOSE,
        HELPER_STATUS,
        HELPER_WORKFLOW,
        RESULT_SAYS_WHY,
        SIGNALS_CARRY_A_TOKEN,
        SLOT_GRANTED,
        HelperResult,
        Token,
    )
    from protocol.names import HELPER_STATE
    from protocol.senders import tell_closed
    from workflows import options
    from workflows.failures import CALL_FAILED, cause_of
    from workflows.helper_ending import FINALIZE_AND_HAND_BACK_PATCH, HAND_BACK_IN_ONE_TASK_PATCH, HelperEnding
    from workflows.helper_following import HelperFollowing
    from workflows.helper_opening import (
        DEADLINE_SUMMARY,
        FIRST_LOOK_PATCH,
        HARD_CEILING_SUMMARY,
        OPEN_IN_TASK_PATCH,
        HelperOpening,
    )
    from workflows.helper_v1 import HelperRunV1

# Helpers started before the ending table run the first release's code (workflows/helper_v1.py).
ENDING_TABLE_PATCH = "helper-ending-v2"
# Each patch a new run takes costs a marker and an upsert of TemporalChangeVersion (a visibility write): a run
# records one marker that stands for every patch it takes, the newest first; runs recorded before replay with
# the marker (or markers) they recorded. A later patch gets a new marker here, covering the earlier ones.
ONE_MARKER_PATCHES: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "helper-patches-2026-12-hand-back",
        frozenset(
            {
                ENDING_TABLE_PATCH,
                RESULT_SAYS_WHY,
                HAND_BACK_IN_ONE_TASK_PATCH,
                OPEN_IN_TASK_PATCH,
                FIRST_LOOK_PATCH,
                FINALIZE_AND_HAND_BACK_PATCH,
            }
        ),
    ),
    (
        "helper-patches-2026-12-look",
        frozenset(
            {ENDING_TABLE_PATCH, RESULT_SAYS_WHY, HAND_BACK_IN_ONE_TASK_PATCH, OPEN_IN_TASK_PATCH, FIRST_LOOK_PATCH}
        ),
    ),
    (
        "helper-patches-2026-12-open",
        frozenset({ENDING_TABLE_PATCH, RESULT_SAYS_WHY, HAND_BACK_IN_ONE_TASK_PATCH, OPEN_IN_TASK_PATCH}),
    ),
    ("helper-patches-2026-12", frozenset({ENDING_TABLE_PATCH, RESULT_SAYS_WHY, HAND_BACK_IN_ONE_TASK_PATCH})),
)


_Task = TypeVar("_Task", bound=asyncio.Future[Any])


@workflow.defn(name=HELPER_WORKFLOW)
class HelperWorkflow(HelperOpening, HelperFollowing, HelperEnding, HelperRunV1):
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
        self.explanation = ""  # the outcome's owner-facing reason, once finalized
        self.closing = False  # closed by the owner while running; the slot waits for the core's stop
        self.stopping_for_authorization = False
        self.deadline_seen = False
        self.open_unanswered = False  # the create may have made a session whose id never came back (R38)
        self.last_result: FollowResult | None = None
        self.authorization_result: FollowResult | None = None
        self._opening: asyncio.Future[OpenedSession] | None = None
        self._follow_task: asyncio.Future[FollowResult] | None = None
        self._first_look: OpenedSession | None = None  # the open's look at its session, for the first follow
        self._finish: asyncio.Task[bool] | None = None
        self._cancel: asyncio.Task[CancelResult] | None = None
        self._row_closing: asyncio.Task[None] | None = None
        self._started: list[asyncio.Future[Any]] = []
        self._covered: frozenset[str] = frozenset()  # set first thing in `run`: the patches its one marker stands for

    @workflow.signal(name=SLOT_GRANTED)
    def slot_granted(self, token: Token | None = None) -> None:
        if self._unsigned(token, SLOT_GRANTED):
            return
        self.slot = True

    @workflow.signal(name=CLOSE)
    def close(self, token: Token | None = None) -> None:
        if self._unsigned(token, CLOSE):
            return
        self.close_requested = True

    def _unsigned(self, token: Token | None, signal: str) -> bool:
        """A bare signal comes from a client without the keys (R39), or from a first-release coordinator in a
        history recorded before tokens (no patch marker there, so it is obeyed as it was)."""
        if token is not None or not workflow.patched(SIGNALS_CARRY_A_TOKEN):
            return False
        workflow.logger.warning("%s: a %s signal without its token was ignored", self.start.helper_id, signal)
        return True

    @workflow.query(name=HELPER_STATUS)
    def status(self) -> dict[str, str | None]:
        return {
            "state": self.state.value,
            "session_id": self.session_id,
            "outcome": self.outcome.value if self.outcome else None,
        }

    @workflow.run
    async def run(self, start: HelperStart) -> HelperResult | str:
        self._covered = next(
            (covered for marker, covered in ONE_MARKER_PATCHES if workflow.patched(marker)), frozenset()
        )
        if not self._patched(ENDING_TABLE_PATCH):
            return await self._run_v1(start)
        workflow.set_current_details(f"waiting for a running slot · {start.title}")
        await workflow.wait_condition(lambda: self.slot or self.close_requested)
        if self.close_requested:
            kind = await self._end(Ending(OutcomeKind.CLOSED, Explanation.CLOSED))
        else:
            kind = await self._run_session(start)
        await self._settle()
        if not self._patched(RESULT_SAYS_WHY):
            return kind.value  # as histories recorded before the change completed
        # The outcome is final and stored; the workflow's status and result only show it in the Web UI.
        result = HelperResult(outcome=kind, reason=self.explanation)
        if kind is OutcomeKind.FAILED:
            raise ApplicationError(
                self.explanation or "the helper failed", result, type=ErrorType.HELPER_FAILED, non_retryable=True
            )
        return result

    # --- the running phase: wait -> trigger -> step ---------------------------------------------------

    async def _run_session(self, start: HelperStart) -> OutcomeKind:
        limits = start.limits
        started_at = workflow.now()
        deadline_at = started_at + timedelta(milliseconds=limits.deadline_ms)
        hard_at = started_at + timedelta(milliseconds=limits.hard_ceiling_ms)
        open_in_task = self._patched(OPEN_IN_TASK_PATCH)
        if not open_in_task:  # as histories recorded before: both timers first, then the open activity
            deadline = self._timer(deadline_at, DEADLINE_SUMMARY)
            hard = self._timer(hard_at, HARD_CEILING_SUMMARY)
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
            first_look=self._first_look_of(start) if self._patched(FIRST_LOOK_PATCH) else None,
        )
        if open_in_task:
            self._opening = self._track(await self._open_in_task(opening))
            # The open's first attempt held this task for part of the time (workflow.now() has moved on with it):
            # the deadline's timer gets what is left of it. The hard ceiling's timer starts when the deadline
            # passes (one timer for most helpers, which end before it), also for what is left of it.
            deadline = self._timer(deadline_at, DEADLINE_SUMMARY)
            hard = asyncio.get_running_loop().create_future()
        else:
            self._opening = self._track(self._open_activity(opening))
        timers = {"deadline": deadline, "hard": hard}  # the hard ceiling's may start later
        try:
            while True:
                await workflow.wait_condition(
                    lambda: (
                        self._finish_answered() or self._next_trigger(timers["deadline"], timers["hard"]) is not None
                    )
                )
                if self._finish_answered():
                    await self._take_finish()
                    continue
                trigger = self._next_trigger(deadline, timers["hard"])
                assert trigger is not None
                step = await self._decide(trigger, deadline)
                if step.end is not None:
                    return await self._end(step.end)
                if trigger is Trigger.DEADLINE and open_in_task:
                    timers["hard"] = self._timer(hard_at, HARD_CEILING_SUMMARY)
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
            self._first_look = opened
            return decide(trigger, self._situation(), deadline_passed=deadline.done())
        if trigger is Trigger.DEADLINE:
            self.deadline_seen = True
        return decide(trigger, situation)

    def _apply(self, step: Step) -> None:
        if step.close_row:
            self.closing = True
            self._row_closing = self._track(asyncio.ensure_future(self._close_row()))
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
            self._follow_task = self._follow_or_look(step)

    def _finish_answered(self) -> bool:
        return self._finish is not None and self._finish.done()

    def _situation(self) -> Situation:
        return Situation(
            phase=Phase.FOLLOWING if self.session_id is not None else Phase.OPENING,
            closing=self.closing,
            finish_asked=self.finish_reason,
            stopping_for_authorization=self.stopping_for_authorization,
        )

    # --- taking results -------------------------------------------------------------------------------

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
            return await cancel
        except ActivityError as error:
            return CancelResult(stopped=False, reachable=False, detail=cause_of(error))

    async def _take_finish(self) -> None:
        finish, self._finish = self._finish, None
        assert finish is not None
        try:
            await finish
        except ActivityError as error:
            # The follow goes on; if the core never finishes, the hard ceiling still holds (R15).
            workflow.logger.warning("finish-now for %s failed: %s", self.start.helper_id, cause_of(error))

    # --- effects ----------------------------------------------------------------------------------------

    async def _close_row(self) -> None:
        """Close the row at once (R21), then let the coordinator answer the owner's close."""
        self.generation += 1
        await workflow.execute_local_activity_method(
            RowActivities.mark_closed, MarkClosed(row=self._row_key()), **options.STORE_WRITE
        )
        if self.outcome is None:
            self.state = RowState.CLOSED
        await self._tell_coordinator(tell_closed(self.start.owner, self.start.helper_id))

    # --- small helpers ---------------------------------------------------------------------------------

    def _patched(self, patch_id: str) -> bool:
        if patch_id in self._covered:
            return True
        return workflow.patched(patch_id)

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
