"""Activities that talk to the core: open, follow, finish, cancel and reset one session (R9-R17, R20, R24).

Every core call is bounded by HELPER_CHECK_MS (R10). The follow activity is the only long one: it
polls for one window, writes progress into the row, heartbeats its cursor, and returns only when
the workflow must decide. At the end of a window it fails with a benign retryable error; Temporal
retries it (no history event) and the next attempt resumes from the heartbeat details.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.core_client import (
    CoreClient,
    CoreError,
    CoreProtocolError,
    CoreRejected,
    CoreUnavailable,
    SessionNotFound,
)
from domain.activity_io import CancelResult, OpenedSession, OpenSession, SessionRef
from domain.core_api import CreateSession, SessionLimits
from domain.follow import FollowCursor, FollowRequest, FollowResult, Verdict, judge, result_from
from domain.rows import RowState
from domain.work import fold_usage
from store.helper_store import HelperStore

log = logging.getLogger(__name__)

FOLLOW_WINDOW_ELAPSED = "FollowWindowElapsed"
CORE_REJECTED = "CoreRejected"
# Cleanup calls try this often before they give up (reset parks the session, R20).
CLEANUP_ATTEMPTS = 3


class SessionActivities:
    def __init__(self, store: HelperStore, core: CoreClient) -> None:
        self.store = store
        self.core = core

    @activity.defn(name="open_session")
    async def open_session(self, request: OpenSession) -> OpenedSession:
        """Mark the row running and create the session; the key makes a retry return the same session (R9)."""
        key = request.row
        row = await self.store.get(key.owner, key.helper_id)
        if row is None or row.seq != key.seq:
            raise ApplicationError(f"row {key.owner}/{key.helper_id}#{key.seq} is gone", non_retryable=True)
        await self.store.write_state(
            key.owner,
            key.helper_id,
            key.seq,
            key.generation,
            state=RowState.RUNNING,
            started_at=request.started_at,
            deadline_at=request.deadline_at,
        )
        try:
            created = await self.core.create(
                CreateSession(
                    idempotency_key=request.idempotency_key,
                    owner=key.owner,
                    helper_id=key.helper_id,
                    task=row.task,
                    boundary=list(row.boundary),
                    language=row.language,
                    model=row.model,
                    limits=SessionLimits(
                        max_steps=request.limits.max_steps, max_input_tokens=request.limits.max_input_tokens
                    ),
                )
            )
        except CoreRejected as error:
            raise ApplicationError(str(error), type=CORE_REJECTED, non_retryable=True) from None
        except CoreProtocolError as error:
            raise ApplicationError(str(error), type="CoreProtocolError") from None
        except CoreError as error:
            raise ApplicationError(str(error), type="CoreUnavailable") from None
        # The session id is durable before the workflow moves on: no lost session id (seed risk 7).
        await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, session_id=created.session_id)
        return OpenedSession(session_id=created.session_id, created=created.created)

    @activity.defn(name="follow_session")
    async def follow_session(self, request: FollowRequest) -> FollowResult:
        details = activity.info().heartbeat_details
        cursor = FollowCursor.model_validate(details[0]) if details else FollowCursor()
        tuning = request.tuning
        loop = asyncio.get_running_loop()
        window_ends = loop.time() + tuning.window_ms / 1000
        while True:
            decided = await self._observe_once(request, cursor)
            if decided is not None:
                return decided
            failure = _budget_exhausted(cursor, tuning.silence_ms, tuning.bad_answers)
            if failure is not None:
                return FollowResult(verdict=Verdict.CORE_FAILED, error=failure)
            activity.heartbeat(cursor.model_dump(mode="json"))
            if loop.time() >= window_ends:
                raise ApplicationError(
                    "follow window elapsed; the next attempt resumes from the heartbeat",
                    type=FOLLOW_WINDOW_ELAPSED,
                    category=ApplicationErrorCategory.BENIGN,
                )
            await asyncio.sleep(tuning.poll_ms / 1000)

    async def _observe_once(self, request: FollowRequest, cursor: FollowCursor) -> FollowResult | None:
        try:
            snapshot = await self.core.snapshot(request.session_id)
        except SessionNotFound as error:
            return FollowResult(verdict=Verdict.LOST, error=str(error))
        except CoreUnavailable as error:
            cursor.silent_since = cursor.silent_since or datetime.now(UTC)
            log.info("core silent for %s/%s: %s", request.owner, request.helper_id, error)
            return None
        except CoreError as error:
            cursor.bad_answers += 1
            cursor.silent_since = cursor.silent_since or datetime.now(UTC)
            log.warning("bad core answer for %s/%s: %s", request.owner, request.helper_id, error)
            return None
        cursor.silent_since = None
        cursor.bad_answers = 0
        cursor.status = snapshot.status.value
        usage = fold_usage(snapshot.steps, snapshot.input_tokens_total)
        message = snapshot.outcome.text if snapshot.outcome and snapshot.outcome.text else snapshot.last_message
        message_hash = zlib.crc32(message.encode("utf-8"))
        changed = (usage.steps, usage.work_tokens) != (cursor.steps, cursor.work_tokens) or (
            len(message),
            message_hash,
        ) != (cursor.message_length, cursor.message_hash)
        if changed:
            await self.store.write_progress(
                request.owner, request.helper_id, request.seq, request.generation, usage, message
            )
            cursor.steps, cursor.work_tokens, cursor.input_tokens = usage.steps, usage.work_tokens, usage.input_tokens
            cursor.message_length, cursor.message_hash = len(message), message_hash
        verdict = judge(snapshot, usage, request.ceiling_tokens, request.watch_work_ceiling)
        return None if verdict is None else result_from(snapshot, verdict)

    @activity.defn(name="finish_session")
    async def finish_session(self, ref: SessionRef) -> bool:
        """Ask the core to finish now, without tools (R13, R15). False if the session is already gone."""
        try:
            await self.core.finish(ref.session_id)
        except SessionNotFound:
            return False
        except CoreError as error:
            raise ApplicationError(str(error), type="CoreUnavailable") from None
        return True

    @activity.defn(name="cancel_session")
    async def cancel_session(self, ref: SessionRef) -> CancelResult:
        """Cancel the turn; `stopped` only when the core confirms the turn has stopped (R7, R21)."""
        try:
            answer = await self.core.cancel(ref.session_id)
        except SessionNotFound:
            return CancelResult(stopped=True, detail="the core no longer knows the session")
        except CoreError as error:
            if activity.info().attempt < CLEANUP_ATTEMPTS:
                raise ApplicationError(str(error), type="CoreUnavailable") from None
            return CancelResult(stopped=False, reachable=False, detail=str(error))
        return CancelResult(stopped=answer.stopped, detail=answer.status.value)

    @activity.defn(name="reset_session")
    async def reset_session(self, ref: SessionRef) -> bool:
        """Cleanup after finalizing (R20). A reset that keeps failing parks the session; nothing else changes."""
        try:
            await self.core.reset(ref.session_id)
        except SessionNotFound:
            return True
        except CoreError as error:
            if activity.info().attempt < CLEANUP_ATTEMPTS:
                raise ApplicationError(str(error), type="CoreUnavailable") from None
            log.warning("reset of session %s failed, parking it: %s", ref.session_id, error)
            await self.store.record_parked(ref.owner, ref.helper_id, ref.session_id, str(error))
            return False
        return True


def _budget_exhausted(cursor: FollowCursor, silence_ms: int, bad_answers: int) -> str | None:
    if cursor.bad_answers >= bad_answers:
        return f"the core answered {cursor.bad_answers} times in a row with something that is not the contract"
    if cursor.silent_since is not None and datetime.now(UTC) - cursor.silent_since >= timedelta(
        milliseconds=silence_ms
    ):
        return f"the core gave no valid answer for {silence_ms // 1000} s"
    return None
