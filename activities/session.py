"""Activities that talk to the core: open, follow, finish, cancel and reset one session (R9-R17, R20, R24).

Every core call is bounded by HELPER_CHECK_MS (R10). The follow activity is the only long one: it
reads the snapshot for one window (long polls to a core that versions its snapshots, R44; else every
HELPER_POLL_MS), writes progress into the row, heartbeats its cursor, and returns only when
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

from activities.follow_ups import FollowUps, create_request
from activities.rows import admitted_row
from clients.core_client import (
    CoreClient,
    CoreError,
    CoreProtocolError,
    CoreRejected,
    CoreUnavailable,
    SessionNotFound,
)
from contracts.core_api import SessionCreated, Snapshot
from domain.activity_io import (
    CancelResult,
    FirstLook,
    OpenedSession,
    OpenSession,
    RecoveredSession,
    RecoverSession,
    SessionRef,
    first_look_bound_ms,
)
from domain.book import FOLLOWABLE_KINDS
from domain.bounds import ROW_MESSAGE_MAX, cut
from domain.follow import (
    FollowCursor,
    FollowRequest,
    FollowResult,
    Verdict,
    judge,
    long_poll_wait_ms,
    next_read_waits,
    result_from,
)
from domain.limits import Limits
from domain.rows import HelperRow
from domain.work import fold_usage
from observability import recording
from protocol.errors import ErrorType
from store.helper_store import HelperStore, RowGone
from store.results import ResultDirectories

log = logging.getLogger(__name__)

# Cleanup calls try this often before they give up (reset parks the session, R20).
CLEANUP_ATTEMPTS = 3
# The ending's own try of the reset (activities/ending.py) takes at most this, well inside its local activity's
# 30 s (workflows.options.STORE_WRITE), with the outcome's write and the notice before it.
FIRST_RESET_MAX_S = 5.0


def _retry_or_refuse(error: CoreError) -> ApplicationError:
    """The one mapping of a core failure to the activity's error: a refusal is final; anything else (slow,
    down, restarting, a malformed answer) is an expected fault, retried and logged as one line."""
    if isinstance(error, CoreRejected):
        return ApplicationError(str(error), type=ErrorType.CORE_REJECTED, non_retryable=True)
    kind = ErrorType.CORE_PROTOCOL_ERROR if isinstance(error, CoreProtocolError) else ErrorType.CORE_UNAVAILABLE
    return ApplicationError(str(error), type=kind, category=ApplicationErrorCategory.BENIGN)


class SessionActivities:
    def __init__(self, store: HelperStore, core: CoreClient, results: ResultDirectories | None = None) -> None:
        self.store = store
        self.core = core
        self.results = results
        self.follow_ups = FollowUps(store, core, results)

    @activity.defn(name="open_session")
    async def open_session(self, request: OpenSession) -> OpenedSession:
        """Mark the row running and create the session; the key makes a retry return the same session (R9)."""
        key = request.row
        row = await self.store.start_running(
            key.owner, key.helper_id, key.seq, key.generation, request.started_at, request.deadline_at
        )
        if row is None:  # not written: the row is gone (this fails for good) or a newer generation wrote it
            row = await admitted_row(self.store, key.owner, key.helper_id, key.seq)
        try:
            created = await self._create(row, request.idempotency_key, request.limits, _seconds(request.check_ms))
        except CoreError as error:
            raise _retry_or_refuse(error) from None
        # The session id is durable before the workflow moves on: no lost session id (seed risk 7).
        await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, session_id=created.session_id)
        await self.follow_ups.release_earlier(row)
        opened = OpenedSession(session_id=created.session_id, created=created.created)
        if request.first_look is not None:
            opened.looked, opened.cursor = await self._first_look(request, request.first_look, created.session_id)
        return opened

    async def _first_look(
        self, request: OpenSession, look: FirstLook, session_id: str
    ) -> tuple[FollowResult | None, FollowCursor | None]:
        """Read the new session as the follow would, waiting up to `look.wait_ms` for a change: a session that has
        already ended (a quick answer, a refusal at the first step) needs no follow activity. Best effort: a core
        that is slow or silent here is the follow's to judge, so the look gives up at its bound."""
        key = request.row
        following = FollowRequest(
            owner=key.owner,
            helper_id=key.helper_id,
            seq=key.seq,
            session_id=session_id,
            generation=key.generation,
            ceiling_tokens=look.ceiling_tokens,
            tuning=look.tuning,
            check_ms=request.check_ms,
        )
        cursor = FollowCursor()
        try:
            async with asyncio.timeout(first_look_bound_ms(look.wait_ms) / 1000):
                looked = await self._observe_once(following, cursor, 0)
                if looked is None and cursor.version is not None and look.wait_ms > 0:
                    looked = await self._observe_once(following, cursor, look.wait_ms)
        except TimeoutError:
            return None, None  # the follow starts from nothing, as before the first look
        if cursor.silent_since is not None:
            return None, None  # silence is counted by the follow, over its own budget
        return looked, cursor

    async def _create(
        self, row: HelperRow, idempotency_key: str, limits: Limits, timeout_s: float | None
    ) -> SessionCreated:
        """Create the row's session; a retry or a recovery under the same key sends the same requests. A
        follow-up first asks to continue the earlier session and, if the core refuses, carries its outcome."""
        if row.follow_up_of is None:
            return await self.core.create(create_request(row, idempotency_key, limits), timeout_s=timeout_s)
        requests = await self.follow_ups.create_requests(row, idempotency_key, limits)
        for continuation in requests[:-1]:
            try:
                return await self.core.create(continuation, timeout_s=timeout_s)
            except CoreRejected as refused:
                log.warning(
                    "%s/%s: the core would not continue the earlier session: %s", row.owner, row.helper_id, refused
                )
        return await self.core.create(requests[-1], timeout_s=timeout_s)

    @activity.defn(name="follow_session")
    async def follow_session(self, request: FollowRequest) -> FollowResult:
        recording.follow_attempt()
        details = activity.info().heartbeat_details
        # No heartbeat yet: go on from the open's first look, if it took one.
        cursor = FollowCursor.model_validate(details[0]) if details else (request.cursor or FollowCursor())
        tuning = request.tuning
        loop = asyncio.get_running_loop()
        window_ends = loop.time() + tuning.window_ms / 1000
        wait_ms = long_poll_wait_ms(tuning, request.check_ms or round(self.core.check_seconds * 1000))
        while True:
            asked_at, version_before = loop.time(), cursor.version
            long_polled = wait_ms > 0 and version_before is not None
            decided = await self._observe_once(request, cursor, wait_ms if long_polled else 0)
            if decided is not None:
                return decided
            failure = _budget_exhausted(cursor, tuning.silence_ms, tuning.bad_answers)
            if failure is not None:
                silent = cursor.bad_answers < tuning.bad_answers
                return FollowResult(verdict=Verdict.CORE_FAILED, error=failure, silent=silent)
            activity.heartbeat(cursor.model_dump(mode="json"))
            if loop.time() >= window_ends:
                raise ApplicationError(
                    "follow window elapsed; the next attempt resumes from the heartbeat",
                    type=ErrorType.FOLLOW_WINDOW_ELAPSED,
                    category=ApplicationErrorCategory.BENIGN,
                )
            changed = cursor.version != version_before
            if not next_read_waits(long_polled, changed, (loop.time() - asked_at) * 1000, wait_ms):
                await asyncio.sleep(tuning.poll_ms / 1000)

    async def _observe_once(self, request: FollowRequest, cursor: FollowCursor, wait_ms: int) -> FollowResult | None:
        """One read of the snapshot, a long poll when `wait_ms` > 0; progress written when it changed."""
        try:
            snapshot = await self.core.snapshot(
                request.session_id, timeout_s=_seconds(request.check_ms), after=cursor.version, wait_ms=wait_ms
            )
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
        cursor.version = snapshot.version
        usage = fold_usage(snapshot.steps, snapshot.input_tokens_total)
        message = snapshot.outcome.text if snapshot.outcome and snapshot.outcome.text else snapshot.last_message
        message_hash = zlib.crc32(message.encode("utf-8"))
        changed = (usage.steps, usage.work_tokens) != (cursor.steps, cursor.work_tokens) or (
            len(message),
            message_hash,
        ) != (cursor.message_length, cursor.message_hash)
        if changed:
            # The row keeps the start of a huge message; the whole one is in session.json (R36).
            await self.store.write_progress(
                request.owner, request.helper_id, request.seq, request.generation, usage, cut(message, ROW_MESSAGE_MAX)
            )
            cursor.steps, cursor.work_tokens, cursor.input_tokens = usage.steps, usage.work_tokens, usage.input_tokens
            cursor.message_length, cursor.message_hash = len(message), message_hash
        verdict = judge(snapshot, usage, request.ceiling_tokens, request.watch_work_ceiling, request.stop_at_pauses)
        lists = (len(snapshot.actions), len(snapshot.refusals))
        if (
            verdict is not None
            or lists != (cursor.saved_actions, cursor.saved_refusals)
            or (changed and len(message) > ROW_MESSAGE_MAX)
        ):
            await self._keep_whole(request, snapshot)
            cursor.saved_actions, cursor.saved_refusals = lists
        return None if verdict is None else result_from(snapshot, verdict)

    async def _keep_whole(self, request: FollowRequest, snapshot: Snapshot) -> None:
        """The whole snapshot, beside the outcome, off the event loop: payloads carry only its first part."""
        if self.results is None:
            return
        directory = self.results.path_for(request.owner, request.helper_id, request.seq)
        await asyncio.to_thread(self.results.write_session, directory, snapshot.model_dump(mode="json"))

    @activity.defn(name="finish_session")
    async def finish_session(self, ref: SessionRef) -> bool:
        """Ask the core to finish now, without tools (R13, R15). False if the session is already gone."""
        try:
            await self.core.finish(ref.session_id, timeout_s=_seconds(ref.check_ms))
        except SessionNotFound:
            return False
        except CoreError as error:
            raise _retry_or_refuse(error) from None
        return True

    @activity.defn(name="cancel_session")
    async def cancel_session(self, ref: SessionRef) -> CancelResult:
        """Cancel the turn; `stopped` only when the core confirms the turn has stopped (R7, R21)."""
        try:
            answer = await self.core.cancel(ref.session_id, timeout_s=_seconds(ref.check_ms))
        except SessionNotFound:
            return CancelResult(stopped=True, detail="the core no longer knows the session")
        except CoreError as error:
            if activity.info().attempt < CLEANUP_ATTEMPTS:
                raise _retry_or_refuse(error) from None
            return CancelResult(stopped=False, reachable=False, detail=str(error))
        # "Stopped" needs a stopped turn: an answer that says so of a running one is not believed (R37).
        stopped = answer.stopped and answer.status.is_terminal
        return CancelResult(stopped=stopped, detail=answer.status.value)

    @activity.defn(name="reset_session")
    async def reset_session(self, ref: SessionRef) -> bool:
        """Cleanup after finalizing (R20). A reset that keeps failing parks the session; nothing else changes.

        A session a follow-up may continue is kept instead, on a core that can continue it (issue 14)."""
        try:
            await self._reset(ref)
        except CoreError as error:
            if activity.info().attempt < CLEANUP_ATTEMPTS:
                raise _retry_or_refuse(error) from None
            log.warning("reset of session %s failed, parking it: %s", ref.session_id, error)
            await self.store.record_parked(ref.owner, ref.helper_id, ref.session_id, str(error))
            return False
        return True

    async def reset_once(self, ref: SessionRef) -> bool:
        """One try of `reset_session`'s work, for the ending's local activity: False (never raised) when the core
        failed it, and `reset_session` then retries and parks as always. Bounded at FIRST_RESET_MAX_S, so a core
        that hangs cannot make the ending's activity time out and repeat. An outcome a follow-up may continue
        is left to `reset_session`: whether its session is kept asks the core twice more."""
        if ref.outcome_kind is None or ref.outcome_kind in FOLLOWABLE_KINDS:
            return False
        bound = min(_seconds(ref.check_ms) or self.core.check_seconds, FIRST_RESET_MAX_S)
        try:
            await self._reset(ref, bound)
        except CoreError as error:
            log.info("first reset of session %s failed, retried by reset_session: %s", ref.session_id, error)
            return False
        return True

    async def _reset(self, ref: SessionRef, timeout_s: float | None = None) -> None:
        """Reset the session, or keep it for a follow-up; an unknown session is reset already. Raises CoreError."""
        if await self.follow_ups.keep_instead_of_reset(ref.owner, ref.helper_id, ref.session_id, ref.outcome_kind):
            return
        try:
            answer = await self.core.reset(ref.session_id, timeout_s=timeout_s or _seconds(ref.check_ms))
        except SessionNotFound:
            return
        if not answer.reset:
            raise CoreUnavailable(f"the core did not reset session {ref.session_id}")

    @activity.defn(name="reset_kept_sessions")
    async def reset_kept_sessions(self) -> int:
        """The hourly sweep: reset the kept sessions nothing can need any more (issue 14, R20)."""
        return await self.follow_ups.reset_kept_sessions()

    @activity.defn(name="recover_session")
    async def recover_session(self, request: RecoverSession) -> RecoveredSession:
        """The create was never answered: ask again with the same key, which names the session if the core
        made one (or makes one now), then cancel and reset it, so no session runs unseen (R38)."""
        key = request.row
        try:
            row = await admitted_row(self.store, key.owner, key.helper_id, key.seq)
        except RowGone:
            return RecoveredSession()
        # Without the hard ceiling's pressure each call may take a few check intervals (stated bound).
        bound = 4 * (_seconds(request.check_ms) or self.core.check_seconds)
        try:
            created = await self._create(row, request.idempotency_key, request.limits, bound)
        except CoreRejected:
            return RecoveredSession()  # the core refuses the task: it never ran
        except CoreError as error:
            raise _retry_or_refuse(error) from None
        session_id = created.session_id
        await self.store.write_state(key.owner, key.helper_id, key.seq, key.generation, session_id=session_id)
        # Cancel, then reset whatever the cancel answered: a reset ends the session too. A failure is retried
        # (the next attempt finds the same session by its key) and parked only after the last attempt.
        stopped = False
        try:
            answer = await self.core.cancel(session_id, timeout_s=bound)
            stopped = answer.stopped and answer.status.is_terminal
        except SessionNotFound:
            stopped = True
        except CoreError as error:
            log.warning("cancel of session %s found by its key failed: %s", session_id, error)
        try:
            answer_reset = await self.core.reset(session_id, timeout_s=bound)
            if not answer_reset.reset:
                raise CoreUnavailable(f"the core did not reset session {session_id}")
            stopped = True
        except SessionNotFound:
            stopped = True
        except CoreError as error:
            if activity.info().attempt < CLEANUP_ATTEMPTS:
                raise _retry_or_refuse(error) from None
            log.warning("session %s found by its key could not be reset: %s; parking it", session_id, error)
            await self.store.record_parked(key.owner, key.helper_id, session_id, str(error))
        return RecoveredSession(session_id=session_id, stopped=stopped)


def _seconds(check_ms: int | None) -> float | None:
    return None if check_ms is None else check_ms / 1000


def _budget_exhausted(cursor: FollowCursor, silence_ms: int, bad_answers: int) -> str | None:
    if cursor.bad_answers >= bad_answers:
        return f"the core answered {cursor.bad_answers} times in a row with something that is not the contract"
    if cursor.silent_since is not None and datetime.now(UTC) - cursor.silent_since >= timedelta(
        milliseconds=silence_ms
    ):
        return f"the core gave no valid answer for {silence_ms // 1000} s"
    return None
