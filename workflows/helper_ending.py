"""How a helper ends: stop what is in flight, write the one outcome, find a lost session, hand the slot back
(R18-R20, R35, R38). A mixin of `HelperWorkflow`, kept apart so each file says one thing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.ending import EndingActivities
    from activities.notices import tell_finished as tell_finished_activity
    from activities.rows import RowActivities
    from activities.session import SessionActivities
    from domain.activity_io import Finalize, HandBack, HelperStart, RecoverSession, RowKey, SessionRef, TellFinished
    from domain.book import FinishedNotice
    from domain.ending import Ending, row_state_of
    from domain.ending_texts import explain
    from domain.follow import FollowResult
    from domain.limits import kept_until
    from domain.outcome import OutcomeKind
    from domain.rows import RowState
    from protocol.names import HELPER_OUTCOME, HELPER_STATE
    from protocol.senders import tell_finished
    from workflows import options
    from workflows.failures import CALL_FAILED, cause_of

# After the outcome, cancelled activities get this long to confirm, so the workflow never completes while
# one of their results is on its way (that would fail the completing task with UnhandledCommand).
SETTLE_WAIT = timedelta(seconds=60)
DETAILS_REASON_MAX = 600
# The notice and the reset run as local activities, so the helper completes in the task that finalized it
# (histories recorded before run them as a signal command and an activity, one or two tasks more).
HAND_BACK_IN_ONE_TASK_PATCH = "hand-back-in-one-task"
# The outcome's write, the notice and the reset's first try are one local activity (activities/ending.py: two
# activations and markers fewer per helper); histories recorded before run them as three (and a helper that
# must find a lost session still does, R38).
FINALIZE_AND_HAND_BACK_PATCH = "finalize-and-hand-back"


class HelperEnding:
    """The ending half of `HelperWorkflow`; the attributes are the workflow's."""

    start: HelperStart
    generation: int
    session_id: str | None
    state: RowState
    outcome: OutcomeKind | None
    explanation: str
    open_unanswered: bool
    last_result: FollowResult | None
    authorization_result: FollowResult | None
    _opening: asyncio.Future[Any] | None
    _follow_task: asyncio.Future[Any] | None
    _finish: asyncio.Future[Any] | None
    _cancel: asyncio.Future[Any] | None
    _started: list[asyncio.Future[Any]]
    # Provided by `HelperWorkflow`; declared here so the mixin type-checks without stubs.
    _row_key: Callable[[], RowKey]
    _session_ref: Callable[[], SessionRef]
    _idempotency_key: Callable[[], str]
    _patched: Callable[[str], bool]

    # --- the one finalizer -----------------------------------------------------------------------------

    async def _end(self, ending: Ending) -> OutcomeKind:
        """Stop everything still in flight, write the outcome once (R19), hand the row and slot back."""
        if self._opening is not None and not self._opening.done():
            self.open_unanswered = True
        for task in (self._opening, self._follow_task, self._finish, self._cancel):
            if task is not None and not task.done():
                task.cancel()
        start = self.start
        explanation = explain(ending.explanation, start.language, start.limits, start.follow.silence_ms)
        result = self.last_result
        if ending.kind is OutcomeKind.AUTHORIZATION and self.authorization_result is not None:
            result = self.authorization_result.model_copy(
                update={"actions": (result or self.authorization_result).actions}
            )
        return await self._finalize(ending.kind, ending.row_state, explanation, result)

    async def _finalize(
        self, kind: OutcomeKind, state: RowState, explanation: str, result: FollowResult | None
    ) -> OutcomeKind:
        start = self.start
        finished_at = workflow.now()
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
        notice = FinishedNotice(
            helper_id=start.helper_id, seq=start.seq, kind=kind, generation=self.generation, finished_at=finished_at
        )
        # The notice goes with the write, unless a lost session must be found between the two (R38).
        in_one = not self.open_unanswered and self._patched(FINALIZE_AND_HAND_BACK_PATCH)
        reset_done = False
        if in_one:
            hand_back = HandBack(
                final=final,
                notice=notice,
                reset=self._reset_ref(kind) if self.session_id else None,
            )
            handed = await workflow.execute_local_activity_method(
                EndingActivities.finalize_and_hand_back, hand_back, **options.STORE_WRITE
            )
            finalized, reset_done = handed.finalized, handed.reset
        else:
            finalized = await workflow.execute_local_activity_method(
                RowActivities.finalize_outcome, final, **options.STORE_WRITE
            )
        if finalized.already is not None:
            # This task runs again after a lost one had written the outcome: the row's outcome stays, and the
            # workflow ends with it (R19).
            kind, explanation = finalized.already.kind, finalized.already.explanation
            state = row_state_of(kind)
        self.outcome = kind
        self.explanation = explanation
        self.state = state
        workflow.upsert_search_attributes([HELPER_STATE.value_set(state.value), HELPER_OUTCOME.value_set(kind.value)])
        # The reason at the top of the helper's page, without opening its events.
        reason = f": {explanation[:DETAILS_REASON_MAX]}" if explanation else ""
        workflow.set_current_details(f"**{kind.value}**{reason}\n\n{start.title}")
        if in_one:
            if self.session_id is not None and not reset_done:
                await self._reset(kind)  # the cleanup's retries, or a session a follow-up may continue (R20)
            return kind
        if self.open_unanswered:
            # The create was never answered, so a session may run under our key: find it and stop it before
            # the slot passes on, so an owner never has more running sessions than slots (R38).
            await self._recover_lost_session()
        # The notice frees the slot at once; the reset is cleanup and runs beside it (R20).
        if self._patched(HAND_BACK_IN_ONE_TASK_PATCH):
            await self._hand_back(notice, kind)
            return kind
        cleanup = []
        if self.session_id is not None:
            cleanup.append(
                workflow.execute_activity_method(
                    SessionActivities.reset_session,
                    self._reset_ref(kind),
                    summary="reset the session (cleanup)",
                    **options.core_call(start.check_ms),
                )
            )
        await asyncio.gather(self._tell_coordinator(tell_finished(start.owner, notice)), *cleanup)
        return kind

    async def _hand_back(self, notice: FinishedNotice, kind: OutcomeKind) -> None:
        start = self.start
        steps: list[Awaitable[bool]] = [
            workflow.execute_local_activity(
                tell_finished_activity, TellFinished(owner=start.owner, notice=notice), **options.STORE_WRITE
            )
        ]
        if self.session_id is not None:
            steps.append(self._reset(kind))
        await asyncio.gather(*steps)

    def _reset_ref(self, kind: OutcomeKind) -> SessionRef:
        """The session to reset, with the outcome that says whether a follow-up may keep it instead."""
        return self._session_ref().model_copy(update={"outcome_kind": kind})

    async def _reset(self, kind: OutcomeKind) -> bool:
        """Cleanup (R20): a core that refuses the reset leaves the outcome as it is."""
        try:
            return await workflow.execute_local_activity_method(
                SessionActivities.reset_session,
                self._reset_ref(kind),
                **options.cleanup_call(self.start.check_ms),
            )
        except CALL_FAILED as error:
            workflow.logger.warning("reset of session %s refused: %s", self.session_id, cause_of(error))
            return False

    async def _recover_lost_session(self) -> None:
        try:
            recovered = await workflow.execute_activity_method(
                SessionActivities.recover_session,
                RecoverSession(row=self._row_key(), idempotency_key=self._idempotency_key(), limits=self.start.limits),
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
        if recovered.session_id is not None:
            workflow.logger.warning(
                "%s: the unanswered create had made session %s; stopped: %s",
                self.start.helper_id,
                recovered.session_id,
                recovered.stopped,
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
