"""Where the application metrics (observability/metrics.py) are updated: one small call per event.

Activities, the core client and the store call these; workflow code never does (it replays). Every
function here swallows its own failures: a metric must never fail a store write, a core call or an
activity. Label values are checked against the closed sets of metrics.py; anything else is counted as
`other` rather than making a new series.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, Final, ParamSpec, TypeVar

from domain.book.state import EventState, RefusalCode
from domain.outcome import OutcomeKind
from observability.metrics import (
    ADMISSIONS,
    CHAT_DELIVERIES,
    CORE_ERRORS,
    CORE_REQUEST_SECONDS,
    FOLLOW_ATTEMPTS,
    OUTCOMES,
    SLOT_WAIT_SECONDS,
    STORE_CONFLICTS,
    STORE_WRITE_SECONDS,
    TIME_TO_OUTCOME_SECONDS,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

OTHER: Final = "other"
OUTCOME_KINDS: Final = frozenset(kind.value for kind in OutcomeKind)
REFUSAL_REASONS: Final = frozenset(code.value for code in RefusalCode)
# Pending and attempting are on the way; these are where an offer stops (a failed one may be offered again).
FINAL_CHAT_STATES: Final = frozenset(
    state.value for state in (EventState.DELIVERED, EventState.FAILED, EventState.UNCERTAIN, EventState.WITHDRAWN)
)
CORE_ENDPOINTS: Final = frozenset({"create", "snapshot", "finish", "cancel", "reset", "models", "capabilities"})
CORE_ERROR_KINDS: Final = frozenset({"timeout", "connect", "status", "malformed", OTHER})
# write_state serves several activities; the activity names which write it was. Other store writes name
# themselves (the decorator's argument).
STATE_WRITES: Final = {
    "open_session": "open",
    "recover_session": "open",
    "mark_closed": "close",
    "finalize_outcome": "finalize",
    "finalize_and_hand_back": "finalize",
    "coordinator_write": "coordinator",
}
STORE_OPERATIONS: Final = frozenset(
    {"admit", "progress", "remove", "usage", "chat_event", "park", "keep", "state", *STATE_WRITES.values()}
)
BY_ACTIVITY: Final = "state"


def _closed(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER


def _safely(update: Callable[P, None]) -> Callable[P, None]:
    """A metric update that can never raise into the business path; a failure is logged, not raised."""

    @functools.wraps(update)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            update(*args, **kwargs)
        except Exception:
            log.exception("metric update %s failed", update.__name__)

    return guarded


@_safely
def admitted(first_time: bool) -> None:
    """An admission's row was written; a retried or replayed admission (row already there) counts once."""
    if first_time:
        ADMISSIONS.labels("admitted", "none").inc()


@_safely
def refused(reason: str) -> None:
    ADMISSIONS.labels("refused", _closed(reason, REFUSAL_REASONS)).inc()


@_safely
def finalized(kind: str, admitted_at: datetime, started_at: datetime | None, finished_at: datetime) -> None:
    """An outcome was written: its kind, how long the helper waited for a slot, how long it then took."""
    label = _closed(str(kind), OUTCOME_KINDS)
    OUTCOMES.labels(label).inc()
    if started_at is None:  # closed while waiting: it never had a slot
        return
    SLOT_WAIT_SECONDS.observe(max(0.0, (started_at - admitted_at).total_seconds()))
    TIME_TO_OUTCOME_SECONDS.labels(label).observe(max(0.0, (finished_at - started_at).total_seconds()))


@_safely
def chat_delivery(state: str) -> None:
    """A system event's recorded state; only final ones count (pending and attempting are on the way)."""
    if state in FINAL_CHAT_STATES:
        CHAT_DELIVERIES.labels(state).inc()


@_safely
def follow_attempt() -> None:
    FOLLOW_ATTEMPTS.inc()


@_safely
def _core_request(endpoint: str, seconds: float, error: BaseException | None) -> None:
    CORE_REQUEST_SECONDS.labels(endpoint).observe(seconds)
    if error is not None:
        CORE_ERRORS.labels(endpoint, core_error_kind(error)).inc()


def core_error_kind(error: BaseException) -> str:
    """timeout, connect, status (a 4xx or 5xx answer), malformed (not the contract), or other."""
    from clients.core_client import CoreProtocolError, CoreUnavailable  # here: the client imports this module

    if isinstance(error, CoreProtocolError):
        return "malformed"
    if isinstance(error, CoreUnavailable):
        # The client raises from None, but the transport's own error stays the context.
        cause = error.__context__
        if isinstance(cause, TimeoutError):
            return "timeout"
        import aiohttp  # here, not at import: the starter imports this module, and only the worker calls the core

        return "connect" if isinstance(cause, aiohttp.ClientError | OSError) else "status"
    from clients.core_client import CoreError

    return "status" if isinstance(error, CoreError) else OTHER


def core_endpoint(
    endpoint: str,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Times a core client method and counts its failures by kind; cancellation is timed, not counted."""
    label = _closed(endpoint, CORE_ENDPOINTS)

    def decorate(call: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(call)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                return await call(*args, **kwargs)
            except Exception as failure:
                error = failure
                raise
            finally:
                _core_request(label, time.perf_counter() - started, error)

        return timed

    return decorate


def _activity_type() -> str | None:
    """The running activity's type. Looked up without importing temporalio: the starter's reads use the store
    too and must not pay for the SDK (R43); a process that never loaded it runs no activity."""
    activity = sys.modules.get("temporalio.activity")
    if activity is None or not activity.in_activity():
        return None
    return str(activity.info().activity_type)


@_safely
def _store_write(operation: str, seconds: float, result: object, counts_conflicts: bool) -> None:
    if operation == BY_ACTIVITY:
        operation = STATE_WRITES.get(_activity_type() or "", BY_ACTIVITY)
    STORE_WRITE_SECONDS.labels(_closed(operation, STORE_OPERATIONS)).observe(seconds)
    if counts_conflicts and result is False:
        STORE_CONFLICTS.inc()


def store_write(
    operation: str, *, counts_conflicts: bool = False
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Times a store write; with `counts_conflicts`, a False result (the guarded write was not applied: a
    newer generation, or the row gone) counts as a conflict. `BY_ACTIVITY` names the write by its activity."""

    def decorate(write: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(write)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.perf_counter()
            result = await write(*args, **kwargs)
            _store_write(operation, time.perf_counter() - started, result, counts_conflicts)
            return result

        return timed

    return decorate
