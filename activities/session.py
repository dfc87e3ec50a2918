"""Activities that talk to the core: open, follow, finish, cancel and reset one session (R9-R17, R20, R24).

Every core call is bounded by HELPER_CHECK_MS (R10). The follow activity is the only long one: it reads the
snapshot for one window (long polls to a core that versions its snapshots, R44; else every HELPER_POLL_MS), writes
progress into the row, and returns only when the workflow must decide. At the end of a window, and as soon as its
worker starts shutting down, it fails with a benign retryable error; Temporal retries it (no history event), on
another worker if this one is stopping, and the next attempt resumes from the row. It sends no heartbeat while the
core answers (each is a billable action, R57): the replicas' liveness records find a dead worker
(`replica.liveness`), and only the core's faults, which the row does not hold, go in the heartbeat details.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import cleanup
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
from domain.bounds import ROW_MESSAGE_MAX, cut
from domain.limits import Limits
from domain.messages.activities import (
    CancelResult,
    CoreFaults,
    FollowCursor,
    FollowRequest,
    FollowResult,
    OpenedSession,
    OpenSession,
    ParkSession,
    RecoveredSession,
    RecoverSession,
    SessionRef,
    Verdict,
)
from domain.rows import HelperRow
from domain.run.cleanup import FOUND_BY_KEY, parks
from domain.run.follow import judge, next_read_waits, result_from, session_message
from domain.work import Usage, fold_usage
from observability import recording
from protocol.errors import ErrorType
from protocol.names import (
    CANCEL_SESSION,
    FINISH_SESSION,
    FOLLOW_SESSION,
    OPEN_SESSION,
    PARK_SESSION,
    RECOVER_SESSION,
    RESET_KEPT_SESSIONS,
    RESET_SESSION,
)
from replica.liveness import Takeover
from store.helper_store import STORE_FAULTS, HelperStore, RowGone
from store.results import ResultDirectories

log = logging.getLogger(__name__)
T = TypeVar("T")

# A follow's store write or read gives up after this and goes on following (`_FollowWrites`); the pool's own wait
# for a connection is as long (store.database.STORE_POOL_WAIT_S).
FOLLOW_WRITE_BOUND_S = 10.0
# What a thawed replica's follow attempt ends with, and logs, once the server runs a later attempt elsewhere.
SUPERSEDED = "this replica was taken for dead and the follow runs elsewhere now"
# The hourly sweep tries this many parked sessions again, the oldest first, each call bounded by HELPER_CHECK_MS.
PARKED_PER_SWEEP = 100


def _retry_or_refuse(error: CoreError) -> ApplicationError:
    """The one mapping of a core failure to the activity's error: a refusal is final; anything else (slow,
    down, restarting, a malformed answer) is an expected fault, retried and logged as one line."""
    if isinstance(error, CoreRejected):
        return ApplicationError(str(error), type=ErrorType.CORE_REJECTED, non_retryable=True)
    kind = ErrorType.CORE_PROTOCOL_ERROR if isinstance(error, CoreProtocolError) else ErrorType.CORE_UNAVAILABLE
    return ApplicationError(str(error), type=kind, category=ApplicationErrorCategory.BENIGN)


class SessionActivities:
    def __init__(
        self,
        store: HelperStore,
        core: CoreClient,
        results: ResultDirectories | None = None,
        takeover: Takeover | None = None,
    ) -> None:
        self.store = store
        self.core = core
        self.results = results
        self.takeover = takeover or Takeover()
        self.follow_ups = FollowUps(store, core, results)

    @activity.defn(name=OPEN_SESSION)
    @recording.names_store_writes("open")
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
        return OpenedSession(session_id=created.session_id, created=created.created)

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

    @activity.defn(name=FOLLOW_SESSION)
    async def follow_session(self, request: FollowRequest) -> FollowResult:
        recording.follow_attempt()
        info = activity.info()
        faults = CoreFaults.model_validate(info.heartbeat_details[0]) if info.heartbeat_details else CoreFaults()
        # One line per attempt: which replica follows a helper, and which attempt it is.
        log.info("following %s/%s (attempt %d)", request.owner, request.helper_id, info.attempt)
        writes = _FollowWrites(self.store, request, self.takeover)
        # The row names the replica that follows it now, so that if this one dies another starts the follow again
        # at once (replica/liveness.py); the helper's first follow also shows from now on that a worker follows it
        # (until then: granted, waiting for a follow slot), and later attempts keep that first moment.
        await writes.record_replica()
        cursor = await writes.cursor_from_row(faults)
        # A worker that shuts down waits for its activities up to its graceful timeout: a follow would hold it for a
        # whole long poll, and the server would retry it only when the attempt timed out. So the attempt ends as soon
        # as shutdown begins, and the server hands the follow to another worker at once. It ends too when this
        # replica learns it was taken for dead and the attempt was started again elsewhere (`Takeover`).
        ends = asyncio.ensure_future(self._attempt_ends())
        try:
            return await self._follow(request, cursor, writes, ends)
        except _AttemptEnds:
            error = ends.result()
            log.info("%s/%s: %s", request.owner, request.helper_id, error.message)
            raise error from None
        finally:
            ends.cancel()

    async def _attempt_ends(self) -> ApplicationError:
        """The error a follow attempt ends with before its window: its worker stops, or this replica was taken for
        dead and the server runs a later attempt (`replica.liveness.Takeover`)."""
        info = activity.info()
        waits = [asyncio.ensure_future(activity.wait_for_worker_shutdown())]
        try:
            client = activity.client()
        except RuntimeError:  # no Temporal client (a test's ActivityEnvironment): nothing can take the attempt over
            pass
        else:
            superseded = self.takeover.superseded(client, info.workflow_id or "", info.activity_id, info.attempt)
            waits.append(asyncio.ensure_future(superseded))
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if waits[0] in done:
            return ApplicationError(
                "the worker is stopping; the next attempt resumes from the row on another worker",
                type=ErrorType.WORKER_STOPPING,
                category=ApplicationErrorCategory.BENIGN,
            )
        return ApplicationError(
            SUPERSEDED,
            type=ErrorType.FOLLOW_SUPERSEDED,
            category=ApplicationErrorCategory.BENIGN,
        )

    async def _follow(
        self,
        request: FollowRequest,
        cursor: FollowCursor,
        writes: _FollowWrites,
        ends: asyncio.Future[ApplicationError],
    ) -> FollowResult:
        tuning = request.tuning
        loop = asyncio.get_running_loop()
        window_ends = loop.time() + tuning.window_ms / 1000
        beaten = cursor.faults.model_copy()
        while True:
            asked_at, version_before = loop.time(), cursor.version
            long_polled = tuning.wait_ms > 0 and version_before is not None
            decided = await self._observe_once(request, cursor, tuning.wait_ms if long_polled else 0, writes, ends)
            if decided is not None:
                return decided
            await writes.record_replica()  # a no-op once recorded; after a store outage, the row names this replica
            failure = _budget_exhausted(cursor.faults, tuning.silence_ms, tuning.bad_answers)
            if failure is not None:
                silent = cursor.faults.bad_answers < tuning.bad_answers
                return FollowResult(verdict=Verdict.CORE_FAILED, error=failure, silent=silent)
            if cursor.faults != beaten:
                # Only the core's faults are recorded, and only when they change: a core that answers costs no
                # heartbeat, and a silence that outlasts an attempt keeps its budget (R57).
                activity.heartbeat(cursor.faults.model_dump(mode="json"))
                beaten = cursor.faults.model_copy()
            if loop.time() >= window_ends:
                raise ApplicationError(
                    "follow window elapsed; the next attempt resumes from the row",
                    type=ErrorType.FOLLOW_WINDOW_ELAPSED,
                    category=ApplicationErrorCategory.BENIGN,
                )
            changed = cursor.version != version_before
            if not next_read_waits(long_polled, changed, (loop.time() - asked_at) * 1000, tuning.wait_ms):
                await _unless_ended(asyncio.sleep(tuning.poll_ms / 1000), ends)

    async def _observe_once(
        self,
        request: FollowRequest,
        cursor: FollowCursor,
        wait_ms: int,
        writes: _FollowWrites,
        ends: asyncio.Future[ApplicationError],
    ) -> FollowResult | None:
        """One read of the snapshot, a long poll when `wait_ms` > 0; progress written when it changed. A read still
        under way when `ends` is done is given up (`_AttemptEnds`); the writes after a read are never cut
        short, so the cursor always matches the row. A write the store did not take leaves the cursor as it was, so
        the next read writes it again."""
        reading = self.core.snapshot(
            request.session_id, timeout_s=_seconds(request.check_ms), after=cursor.version, wait_ms=wait_ms
        )
        faults = cursor.faults
        try:
            snapshot = await _unless_ended(reading, ends)
        except SessionNotFound as error:
            return FollowResult(verdict=Verdict.LOST, error=str(error))
        except CoreUnavailable as error:
            faults.silent_since = faults.silent_since or datetime.now(UTC)
            log.info("core silent for %s/%s: %s", request.owner, request.helper_id, error)
            return None
        except CoreError as error:
            faults.bad_answers += 1
            faults.silent_since = faults.silent_since or datetime.now(UTC)
            log.warning("bad core answer for %s/%s: %s", request.owner, request.helper_id, error)
            return None
        faults.silent_since = None
        faults.bad_answers = 0
        cursor.status = snapshot.status.value
        cursor.version = snapshot.version
        usage = fold_usage(snapshot.steps, snapshot.input_tokens_total)
        message = session_message(snapshot)
        seen = _fingerprint(message)
        changed = (usage.steps, usage.work_tokens) != (cursor.steps, cursor.work_tokens) or seen != (
            cursor.message_length,
            cursor.message_hash,
        )
        # The row keeps the start of a huge message; the whole one is in session.json (R36).
        if changed and await writes.progress(usage, cut(message, ROW_MESSAGE_MAX)):
            cursor.steps, cursor.work_tokens, cursor.input_tokens = usage.steps, usage.work_tokens, usage.input_tokens
            cursor.message_length, cursor.message_hash = seen
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

    @activity.defn(name=FINISH_SESSION)
    async def finish_session(self, ref: SessionRef) -> bool:
        """Ask the core to finish now, without tools (R13, R15). False if the session is already gone."""
        try:
            await self.core.finish(ref.session_id, timeout_s=_seconds(ref.check_ms))
        except SessionNotFound:
            return False
        except CoreError as error:
            raise _retry_or_refuse(error) from None
        return True

    @activity.defn(name=CANCEL_SESSION)
    async def cancel_session(self, ref: SessionRef) -> CancelResult:
        """Cancel the turn; `stopped` only when the core answers that the turn has stopped (R7, R21). A core that
        does not know the session (404) has not said it stopped: the follow sees what became of it. A failure is
        retried by the activity's policy (`workflows.options.cancel`); once its attempts are spent the workflow
        takes the failure as a stop not confirmed."""
        try:
            answer = await self.core.cancel(ref.session_id, timeout_s=_seconds(ref.check_ms))
        except SessionNotFound as error:
            log.warning("cancel of session %s: the core does not know it; stop not confirmed", ref.session_id)
            return CancelResult(stopped=False, detail=f"not confirmed: {error}")
        except CoreError as error:
            log.info("cancel of session %s failed (attempt %d): %s", ref.session_id, activity.info().attempt, error)
            raise _retry_or_refuse(error) from None
        # "Stopped" needs a stopped turn: an answer that says so of a running one is not believed (R37).
        stopped = answer.stopped and answer.status.is_terminal
        log.info(
            "cancel of session %s: %s (%s)", ref.session_id, "stopped" if stopped else "not stopped yet", answer.status
        )
        return CancelResult(stopped=stopped, detail=answer.status.value)

    @activity.defn(name=RESET_SESSION)
    async def reset_session(self, ref: SessionRef) -> bool:
        """Cleanup after the outcome (R20): reset the session, or keep it for a follow-up. Every failure is
        retried by the activity's policy (`workflows.options.reset`); when its budget is spent the workflow
        parks the session (`park_session`). A session the core no longer knows is reset already."""
        try:
            await self._reset(ref)
        except CoreError as error:
            log.info("reset of session %s failed (attempt %d): %s", ref.session_id, activity.info().attempt, error)
            raise ApplicationError(
                str(error), type=ErrorType.CORE_UNAVAILABLE, category=ApplicationErrorCategory.BENIGN
            ) from None
        return True

    @activity.defn(name=PARK_SESSION)
    async def park_session(self, park: ParkSession) -> None:
        """List a session whose reset kept failing; the hourly sweep tries it again (R20)."""
        log.warning("session %s of %s/%s parked: %s", park.session_id, park.owner, park.helper_id, park.error)
        await self.store.record_parked(park.owner, park.helper_id, park.session_id, park.error)

    async def _reset(self, ref: SessionRef) -> None:
        """Reset the session, or keep it for a follow-up; an unknown session is reset already. Raises CoreError."""
        if await self.follow_ups.keep_instead_of_reset(ref.owner, ref.helper_id, ref.session_id, ref.outcome_kind):
            return
        await cleanup.reset(self.core, ref.session_id, _seconds(ref.check_ms))

    @activity.defn(name=RESET_KEPT_SESSIONS)
    async def reset_kept_sessions(self) -> int:
        """The hourly sweep's cleanup of sessions (R20): reset the kept sessions nothing can need any more, and
        try the parked ones again. Returns how many sessions it reset."""
        return await self.follow_ups.reset_kept_sessions() + await self._reset_parked()

    async def _reset_parked(self) -> int:
        """Reset parked sessions, the oldest first; one the core resets, or no longer knows, is no longer parked.
        One that fails again stays parked for the next sweep."""
        reset = 0
        for parked in await self.store.parked_sessions(PARKED_PER_SWEEP):
            try:
                await cleanup.reset(self.core, parked.session_id)
            except CoreError as error:
                log.warning("parked session %s still not reset, tried again later: %s", parked.session_id, error)
                continue
            await self.store.forget_parked(parked.session_id)
            log.info("parked session %s of %s/%s reset", parked.session_id, parked.owner, parked.helper_id)
            reset += 1
        return reset

    @activity.defn(name=RECOVER_SESSION)
    @recording.names_store_writes("open")
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
        # Cancel, then reset whatever the cancel answered: a reset ends the session too. `stopped` only when the
        # core said so: the cancel answered a stopped turn, or the reset answered reset. A failed reset is retried
        # (the next attempt finds the same session by its key) until the park rule's budget is spent.
        stopped, detail = False, ""
        try:
            answer = await self.core.cancel(session_id, timeout_s=bound)
            stopped = answer.stopped and answer.status.is_terminal
            detail = f"cancel: {answer.status.value}"
        except CoreError as error:  # a 404 too: the core just named this session, so it is no answer to a cancel
            log.warning("cancel of session %s found by its key failed: %s", session_id, error)
            detail = f"cancel: {error}"
        try:
            if await cleanup.reset(self.core, session_id, bound):
                stopped, detail = True, "reset"
            else:
                detail = f"{detail}; reset: the core does not know session {session_id}"
        except CoreError as error:
            if not parks(FOUND_BY_KEY, attempt=activity.info().attempt):
                raise _retry_or_refuse(error) from None
            log.warning("session %s found by its key could not be reset: %s; parking it", session_id, error)
            await self.store.record_parked(key.owner, key.helper_id, session_id, str(error))
            detail = f"{detail}; reset: {error}"
        log.log(
            logging.INFO if stopped else logging.WARNING,
            "session %s of %s/%s found by its key: %s (%s)",
            session_id,
            key.owner,
            key.helper_id,
            "the core confirmed it stopped" if stopped else "stop not confirmed",
            detail,
        )
        return RecoveredSession(session_id=session_id, stopped=stopped, detail=detail)


def _seconds(check_ms: int | None) -> float | None:
    return None if check_ms is None else check_ms / 1000


def _budget_exhausted(faults: CoreFaults, silence_ms: int, bad_answers: int) -> str | None:
    if faults.bad_answers >= bad_answers:
        return f"the core answered {faults.bad_answers} times in a row with something that is not the contract"
    if faults.silent_since is not None and datetime.now(UTC) - faults.silent_since >= timedelta(
        milliseconds=silence_ms
    ):
        return f"the core gave no valid answer for {silence_ms // 1000} s"
    return None


def _fingerprint(message: str) -> tuple[int, int]:
    """How the cursor knows a message again: its length and CRC-32, not the text (heartbeat-sized, cheap)."""
    return len(message), zlib.crc32(message.encode("utf-8"))


class _AttemptEnds(Exception):
    """The follow attempt must end now (its worker stops, or it runs elsewhere): the reason is in `ends`."""


class _FollowWrites:
    """A follow's writes to the store, each bounded by FOLLOW_WRITE_BOUND_S. The follow needs the store only to show
    its progress, never to reach its verdict: a write the store does not take is logged and made again after the
    next read, and the follow goes on, so a store outage costs no retried attempt (docs/operations.md)."""

    def __init__(self, store: HelperStore, request: FollowRequest, takeover: Takeover) -> None:
        self.store = store
        self.request = request
        self.replica_recorded = False
        self.takeover = takeover
        self.takeovers_at_start = takeover.count

    async def record_replica(self) -> None:
        # Once this replica was taken for dead, the survivors may have started the follow elsewhere, and a late
        # write of this attempt would name the wrong replica in the row: it is not made.
        if not self.replica_recorded and self.takeover.count == self.takeovers_at_start:
            r = self.request
            self.replica_recorded = await self._bounded(
                "recording its replica",
                self.store.record_follow_replica(
                    r.owner, r.helper_id, r.seq, r.generation, _this_replica(), starts_following=r.records_start
                ),
            )

    async def progress(self, usage: Usage, message: str | None) -> bool:
        r = self.request
        return await self._bounded(
            "writing its progress",
            self.store.write_progress(r.owner, r.helper_id, r.seq, r.generation, usage, message),
        )

    async def cursor_from_row(self, faults: CoreFaults) -> FollowCursor:
        """The cursor of what the row holds: an attempt goes on where the last one left the row, writing only what
        changed. A row the store cannot give starts an empty cursor: the first read writes the row again."""
        r = self.request
        try:
            row = await asyncio.wait_for(self.store.admitted(r.owner, r.helper_id, r.seq), FOLLOW_WRITE_BOUND_S)
        except RowGone:
            return FollowCursor(faults=faults)
        except STORE_FAULTS as error:
            log.warning("%s/%s: its row could not be read, the follow writes it again: %s", r.owner, r.helper_id, error)
            return FollowCursor(faults=faults)
        message_length, message_hash = _fingerprint(row.last_message or "")
        return FollowCursor(
            steps=row.steps,
            work_tokens=row.work_tokens,
            input_tokens=row.input_tokens,
            message_length=message_length,
            message_hash=message_hash,
            faults=faults,
        )

    async def _bounded(self, what: str, write: Coroutine[Any, Any, bool]) -> bool:
        """True when the store answered the write (whether or not it changed the row)."""
        try:
            await asyncio.wait_for(write, FOLLOW_WRITE_BOUND_S)
        except STORE_FAULTS as error:
            r = self.request
            log.warning(
                "%s/%s: the store failed %s, made again after the next read: %r", r.owner, r.helper_id, what, error
            )
            return False
        return True


def _this_replica() -> str | None:
    """The identity of the worker running this attempt, as the server records it on the attempt; none where the
    activity runs without a Temporal client (a test's `ActivityEnvironment`)."""
    try:
        return activity.client().identity
    except RuntimeError:
        return None


async def _unless_ended(step: Coroutine[Any, Any, T], ends: asyncio.Future[ApplicationError]) -> T:
    """`step`'s result, or `_AttemptEnds` (the step cancelled) once `ends` is done first."""
    if ends.done():
        step.close()
        raise _AttemptEnds
    running = asyncio.ensure_future(step)
    try:
        await asyncio.wait((running, ends), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not running.done():
            running.cancel()
            await asyncio.wait((running,))
    if running.cancelled():
        raise _AttemptEnds
    return running.result()
