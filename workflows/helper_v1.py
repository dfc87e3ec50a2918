"""The first release's helper run, kept so helpers started before the ending table replay unchanged (R25).

`HelperWorkflow.run` takes this path only for histories without the `helper-ending-v2` patch marker,
that is, helpers started by the first release's workers. A helper lives at most its hard ceiling plus
cleanup, so this module can go once no such helper runs (after a rollout plus an hour); the recorded
first-release histories in tests/replay prove it still replays until then. Do not change its commands.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
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
        RowKey,
        SessionRef,
    )
    from domain.book import FinishedNotice
    from domain.ending import Explanation, FinishReason
    from domain.ending_texts import explain
    from domain.follow import FollowRequest, FollowResult, Verdict, terminal_outcome_kind
    from domain.outcome import OutcomeKind
    from domain.rows import RowState
    from domain.texts import text
    from protocol.messages import HELPER_CLOSED, HELPER_FINISHED
    from protocol.names import HELPER_OUTCOME, HELPER_STATE, coordinator_id
    from workflows import options


class HelperRunV1:
    """The first release's running phase and finalizer, as a mixin of `HelperWorkflow`."""

    start: HelperStart
    slot: bool
    close_requested: bool
    generation: int
    session_id: str | None
    state: RowState
    finish_reason: FinishReason | None  # compared with the first release's strings; equal as StrEnum
    outcome: OutcomeKind | None
    closing: bool
    _follow: asyncio.Task[FollowResult]

    async def _run_v1(self, start: HelperStart) -> str:
        workflow.set_current_details(f"waiting for a running slot · {start.title}")
        await workflow.wait_condition(lambda: self.slot or self.close_requested)
        if self.close_requested:
            await self._finalize_v1(OutcomeKind.CLOSED, RowState.CLOSED, explanation=self._text_v1("outcome.closed"))
            return OutcomeKind.CLOSED.value
        kind = await self._run_session_v1(start)
        return kind.value

    # --- the running phase -----------------------------------------------------------------------

    async def _run_session_v1(self, start: HelperStart) -> OutcomeKind:
        limits = start.limits
        started_at = workflow.now()
        deadline_at = started_at + timedelta(milliseconds=limits.deadline_ms)
        hard_at = started_at + timedelta(milliseconds=limits.hard_ceiling_ms)
        # Durable timers: they fire after worker and server restarts too (R15, R25).
        deadline = asyncio.ensure_future(
            workflow.sleep(timedelta(milliseconds=limits.deadline_ms), summary="deadline: ask for a partial outcome")
        )
        hard = asyncio.ensure_future(
            workflow.sleep(timedelta(milliseconds=limits.hard_ceiling_ms), summary="hard ceiling: deadline + grace")
        )
        if self.state is not RowState.RUNNING:  # a helper that started with its slot already shows running
            workflow.upsert_search_attributes([HELPER_STATE.value_set(RowState.RUNNING.value)])
        self.state = RowState.RUNNING
        workflow.set_current_details(
            f"running · deadline {deadline_at:%H:%M:%S} UTC · hard ceiling {hard_at:%H:%M:%S} UTC · {start.title}"
        )

        self.generation += 1
        opening = workflow.start_activity_method(
            SessionActivities.open_session,
            OpenSession(
                row=self._row_key_v1(),
                idempotency_key=self._idempotency_key_v1(),
                limits=limits,
                started_at=started_at,
                deadline_at=deadline_at,
            ),
            summary="create the core session (idempotent key)",
            **options.core_call(start.check_ms),
        )
        await workflow.wait_condition(lambda: opening.done() or hard.done())
        if not opening.done():
            opening.cancel()
            return await self._finalize_v1(
                OutcomeKind.FAILED,
                RowState.UNREPORTED,
                explanation=self._text_v1("outcome.failed", reason=self._text_v1("outcome.core_unreachable")),
            )
        try:
            opened: OpenedSession = opening.result()
        except ActivityError as error:
            deadline.cancel()
            hard.cancel()
            return await self._finalize_v1(
                OutcomeKind.FAILED,
                RowState.UNREPORTED,
                explanation=self._text_v1("outcome.failed", reason=_cause_v1(error)),
            )
        self.session_id = opened.session_id
        try:
            return await self._follow_until_final_v1(start, deadline, hard)
        finally:
            deadline.cancel()
            hard.cancel()

    async def _follow_until_final_v1(
        self, start: HelperStart, deadline: asyncio.Future[None], hard: asyncio.Future[None]
    ) -> OutcomeKind:
        self._follow = self._start_follow_v1(watch_work_ceiling=True)
        stopping_for_authorization = False
        while True:
            await workflow.wait_condition(
                lambda: (
                    self._follow.done()
                    or hard.done()
                    or (self.close_requested and not self.closing)
                    or (deadline.done() and self.finish_reason is None and not self.closing)
                )
            )
            closing = self.closing
            follow = self._follow
            if hard.done():
                follow.cancel()
                if closing:
                    return await self._finalize_v1(OutcomeKind.CLOSED, RowState.CLOSED, self._text_v1("outcome.closed"))
                return await self._finalize_v1(
                    OutcomeKind.PARTIAL,
                    RowState.UNREPORTED,
                    explanation=explain(Explanation.HARD_CEILING, start.language, start.limits),
                )
            if self.close_requested and not closing:
                self.closing = True
                if await self._close_running_v1():
                    follow.cancel()
                    return await self._finalize_v1(OutcomeKind.CLOSED, RowState.CLOSED, self._text_v1("outcome.closed"))
                continue  # the slot stays held until the core confirms the stop (R7)
            if deadline.done() and self.finish_reason is None and not closing:
                self.finish_reason = FinishReason.DEADLINE
                await self._finish_now_v1()
                continue
            result = await self._follow_result_v1(follow)
            match result.verdict:
                case Verdict.TERMINAL:
                    assert result.status is not None
                    kind = terminal_outcome_kind(
                        result.status, closing=closing, stopping_for_authorization=stopping_for_authorization
                    )
                    state = RowState.CLOSED if kind is OutcomeKind.CLOSED else RowState.UNREPORTED
                    return await self._finalize_v1(kind, state, self._explanation_v1(kind, start), result)
                case Verdict.QUESTION:
                    if closing:
                        return await self._finalize_v1(
                            OutcomeKind.CLOSED, RowState.CLOSED, self._text_v1("outcome.closed")
                        )
                    return await self._finalize_v1(OutcomeKind.QUESTION, RowState.UNREPORTED, "", result)
                case Verdict.AUTHORIZATION:
                    # Without a webhook an authorization wait ends by a cleanup cancel (seed, R17).
                    stopping_for_authorization = True
                    cancelled = await workflow.execute_activity_method(
                        SessionActivities.cancel_session,
                        self._session_ref_v1(),
                        summary="cleanup cancel of an authorization wait",
                        **options.core_call(start.check_ms),
                    )
                    if cancelled.stopped:
                        kind = OutcomeKind.CLOSED if closing else OutcomeKind.AUTHORIZATION
                        state = RowState.CLOSED if closing else RowState.UNREPORTED
                        return await self._finalize_v1(kind, state, "", result)
                    self._follow = self._start_follow_v1(watch_work_ceiling=False)
                case Verdict.WORK_CEILING:
                    self.finish_reason = FinishReason.WORK_CEILING
                    await self._finish_now_v1()
                    self._follow = self._start_follow_v1(watch_work_ceiling=False)
                case Verdict.LOST:
                    kind = OutcomeKind.CLOSED if closing else OutcomeKind.INTERRUPTED
                    explanation = (
                        self._text_v1("outcome.closed")
                        if closing
                        else self._text_v1("outcome.interrupted", reason=result.error or "session not found")
                    )
                    state = RowState.CLOSED if closing else RowState.UNREPORTED
                    return await self._finalize_v1(kind, state, explanation, None)
                case Verdict.CORE_FAILED:
                    if closing:  # closed by the owner: it reports nothing, whatever the core did (R21)
                        return await self._finalize_v1(
                            OutcomeKind.CLOSED, RowState.CLOSED, self._text_v1("outcome.closed")
                        )
                    return await self._finalize_v1(
                        OutcomeKind.FAILED,
                        RowState.UNREPORTED,
                        self._text_v1("outcome.failed", reason=result.error or "the core failed"),
                        None,
                    )

    def _start_follow_v1(self, *, watch_work_ceiling: bool) -> asyncio.Task[FollowResult]:
        assert self.session_id is not None
        start = self.start
        return workflow.start_activity_method(
            SessionActivities.follow_session,
            FollowRequest(
                owner=start.owner,
                helper_id=start.helper_id,
                seq=start.seq,
                session_id=self.session_id,
                generation=self.generation,
                ceiling_tokens=start.limits.ceiling_tokens,
                watch_work_ceiling=watch_work_ceiling,
                tuning=start.follow,
            ),
            summary=f"follow session {self.session_id}: live steps and work tokens in the heartbeat details",
            **options.follow(start.check_ms, start.follow),
        )

    async def _follow_result_v1(self, follow: asyncio.Task[FollowResult]) -> FollowResult:
        try:
            return await follow
        except ActivityError as error:
            return FollowResult(verdict=Verdict.CORE_FAILED, error=_cause_v1(error))

    async def _finish_now_v1(self) -> None:
        """Ask the core for the partial outcome (R13, R15); if it cannot be asked, the hard ceiling still holds."""
        try:
            await workflow.execute_activity_method(
                SessionActivities.finish_session,
                self._session_ref_v1(),
                summary=f"finish now ({self.finish_reason})",
                **options.core_call(self.start.check_ms, give_up_after=timedelta(minutes=1)),
            )
        except ActivityError as error:
            workflow.logger.warning("finish-now for %s failed: %s", self.start.helper_id, _cause_v1(error))

    async def _close_running_v1(self) -> bool:
        """Close the row at once and cancel the session; True when the core confirms the turn stopped (R21)."""
        self.generation += 1
        await workflow.execute_local_activity_method(
            RowActivities.mark_closed, MarkClosed(row=self._row_key_v1()), **options.STORE_WRITE
        )
        self.state = RowState.CLOSED
        await self._tell_coordinator_v1(HELPER_CLOSED, self.start.helper_id)
        cancelled: CancelResult = await workflow.execute_activity_method(
            SessionActivities.cancel_session,
            self._session_ref_v1(),
            summary="cancel: closed by the owner",
            **options.core_call(self.start.check_ms),
        )
        return cancelled.stopped

    # --- the one finalizer -----------------------------------------------------------------------

    async def _finalize_v1(
        self, kind: OutcomeKind, state: RowState, explanation: str, result: FollowResult | None = None
    ) -> OutcomeKind:
        """Write the outcome once (R19), hand the row and slot back, then reset the session (R20)."""
        start = self.start
        finished_at = workflow.now()
        self.generation += 1
        final = Finalize(
            row=self._row_key_v1(),
            kind=kind,
            state=state,
            language=start.language,
            model=start.model,
            explanation=explanation,
            question=result.question if result else None,
            authorization=result.authorization if result else None,
            actions=result.actions if result else [],
            refusals=result.refusals if result else [],
            usage=result.usage if result and result.usage.steps else None,
            summary_max=start.summary_max,
            finished_at=finished_at,
        )
        await workflow.execute_local_activity_method(RowActivities.finalize_outcome, final, **options.STORE_WRITE)
        self.outcome = kind
        self.state = state
        workflow.upsert_search_attributes([HELPER_STATE.value_set(state.value), HELPER_OUTCOME.value_set(kind.value)])
        workflow.set_current_details(f"{kind.value} · {start.title}")
        notice = FinishedNotice(
            helper_id=start.helper_id, kind=kind, generation=self.generation, finished_at=finished_at
        )
        # The notice frees the slot at once; the reset is cleanup and runs beside it (R20).
        cleanup = []
        if self.session_id is not None:
            cleanup.append(
                workflow.execute_activity_method(
                    SessionActivities.reset_session,
                    self._session_ref_v1(),
                    summary="reset the session (cleanup)",
                    **options.core_call(start.check_ms),
                )
            )
        await asyncio.gather(self._tell_coordinator_v1(HELPER_FINISHED, notice), *cleanup)
        return kind

    # --- small helpers ----------------------------------------------------------------------------

    async def _tell_coordinator_v1(self, signal: str, payload: object) -> None:
        handle = workflow.get_external_workflow_handle(coordinator_id(self.start.owner))
        try:
            await handle.signal(signal, payload)
        except ApplicationError as error:
            # Only an operator can remove a coordinator; the outcome is final and in the store anyway,
            # and the slot lease of a new coordinator cannot include this helper.
            workflow.logger.error("could not tell the coordinator %s: %s", signal, error)

    def _explanation_v1(self, kind: OutcomeKind, start: HelperStart) -> str:
        if kind is OutcomeKind.CLOSED:
            return self._text_v1("outcome.closed")
        if kind is OutcomeKind.INTERRUPTED:
            return self._text_v1("outcome.interrupted", reason=self._text_v1("reason.turn_interrupted"))
        if kind is not OutcomeKind.PARTIAL or self.finish_reason is None:
            return ""
        if self.finish_reason == "work_ceiling":
            return explain(Explanation.WORK_CEILING, start.language, start.limits)
        return explain(Explanation.DEADLINE, start.language, start.limits)

    def _text_v1(self, key: str, **fields: object) -> str:
        return text(key, self.start.language, **fields)

    def _row_key_v1(self) -> RowKey:
        start = self.start
        return RowKey(owner=start.owner, helper_id=start.helper_id, seq=start.seq, generation=self.generation)

    def _session_ref_v1(self) -> SessionRef:
        assert self.session_id is not None
        return SessionRef(owner=self.start.owner, helper_id=self.start.helper_id, session_id=self.session_id)

    def _idempotency_key_v1(self) -> str:
        # Stable across retries and worker restarts, distinct for a helper id reused after retention (R9).
        info = workflow.info()
        return f"{info.workflow_id}/{info.first_execution_run_id}"


def _cause_v1(error: ActivityError) -> str:
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause or error)
