"""Where the application metrics (observability/metrics.py) are updated: one small call per event.

Activities, the core client and the store call these with plain values; workflow code never does (it
replays). This module imports none of theirs: the label sets below are the metrics' own (metrics.py), and
tests/unit/test_metrics.py holds them beside the domain's names. Every function here swallows its own
failures: a metric must never fail a store write, a core call or an activity. Label values are checked against
the closed sets; anything else is counted as `other` rather than making a new series.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, Final, ParamSpec, TypeVar

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
OUTCOME_KINDS: Final = frozenset(
    {"completed", "partial", "question", "authorization", "failed", "interrupted", "closed"}
)
REFUSAL_REASONS: Final = frozenset(
    {
        "too_many_open",
        "goal_needs_open_place",
        "rows_full",
        "goal_needs_row_place",
        "unknown_helper",
        "not_unreported",
        "invalid_request",
        "wrong_owner",
        "not_followable",
        "not_answerable",
        "stale_question",
        "not_offered",
        "grant_refused",
        "grant_widens",
        "expired",
        "wait_ended",
    }
)
# Pending and attempting are on the way; these are where an offer stops (a failed one may be offered again).
FINAL_CHAT_STATES: Final = frozenset({"delivered", "failed", "uncertain", "withdrawn"})
CORE_ENDPOINTS: Final = frozenset({"create", "snapshot", "finish", "cancel", "reset", "models", "capabilities"})
CORE_ERROR_KINDS: Final = frozenset({"timeout", "connect", "status", "malformed", OTHER})
STORE_OPERATIONS: Final = frozenset(
    {
        "admit",
        "open",
        "progress",
        "finalize",
        "close",
        "coordinator",
        "remove",
        "usage",
        "chat_event",
        "park",
        "keep",
        "replica",
        "audit",
    }
    | {"state"}
)
# A write shared by several callers (a row's state) is named by its caller (`names_store_writes`); unnamed, "state".
BY_CALLER: Final = "state"
_operation: contextvars.ContextVar[str] = contextvars.ContextVar("store_operation", default=BY_CALLER)


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
def core_request(endpoint: str, seconds: float, error_kind: str | None) -> None:
    """A core call took `seconds`; `error_kind` (timeout, connect, status, malformed, other) when it failed."""
    label = _closed(endpoint, CORE_ENDPOINTS)
    CORE_REQUEST_SECONDS.labels(label).observe(seconds)
    if error_kind is not None:
        CORE_ERRORS.labels(label, _closed(error_kind, CORE_ERROR_KINDS)).inc()


def names_store_writes(
    operation: str,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Name the store writes `call` makes that their store method leaves to its caller (`BY_CALLER`)."""

    def decorate(call: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(call)
        async def named(*args: P.args, **kwargs: P.kwargs) -> T:
            token = _operation.set(operation)
            try:
                return await call(*args, **kwargs)
            finally:
                _operation.reset(token)

        return named

    return decorate


@_safely
def _store_write(operation: str, seconds: float, result: object, counts_conflicts: bool) -> None:
    if operation == BY_CALLER:
        operation = _operation.get()
    STORE_WRITE_SECONDS.labels(_closed(operation, STORE_OPERATIONS)).observe(seconds)
    if counts_conflicts and result is False:
        STORE_CONFLICTS.inc()


def store_write(
    operation: str, *, counts_conflicts: bool = False
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Times a store write; with `counts_conflicts`, a False result (the guarded write was not applied: a
    newer generation, or the row gone) counts as a conflict. `BY_CALLER` takes the name from `names_store_writes`."""

    def decorate(write: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(write)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.perf_counter()
            result = await write(*args, **kwargs)
            _store_write(operation, time.perf_counter() - started, result, counts_conflicts)
            return result

        return timed

    return decorate
