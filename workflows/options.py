"""Timeouts and retry policies of every activity, in one place, with the reason for each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy

from domain.limits import FollowTuning

# Store writes run as local activities: one marker event instead of three plus a workflow task, and
# no round trip through the server. They are idempotent (generation guards), so re-running one after
# a lost workflow task is harmless.
# A store write must eventually happen (a finalization is never dropped): retry until the store is back.
STORE_WRITE: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
}

# Admission answers the caller: give up after half a minute and refuse rather than hang the starter.
ADMISSION_WRITE: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=10),
    "schedule_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5)),
}


def core_call(check_ms: int, *, give_up_after: timedelta | None = None) -> dict[str, Any]:
    """One core call: HELPER_CHECK_MS bounds the HTTP call, the activity gets a little more."""
    options: dict[str, Any] = {
        "start_to_close_timeout": timedelta(milliseconds=check_ms) + timedelta(seconds=5),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            non_retryable_error_types=["CoreRejected"],
        ),
    }
    if give_up_after is not None:
        options["schedule_to_close_timeout"] = give_up_after
    return options


def follow(check_ms: int, tuning: FollowTuning) -> dict[str, Any]:
    """The follow activity: one window per attempt, retried at `resume_ms` with its heartbeat cursor."""
    return {
        "start_to_close_timeout": timedelta(milliseconds=tuning.window_ms + 2 * check_ms) + timedelta(seconds=30),
        # A core call may take HELPER_CHECK_MS between heartbeats; a dead worker shows after this.
        "heartbeat_timeout": timedelta(milliseconds=check_ms) + timedelta(seconds=5),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=tuning.resume_ms),
            backoff_coefficient=1.0,
            maximum_interval=timedelta(milliseconds=tuning.resume_ms),
        ),
    }


CHAT_OFFER: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(maximum_attempts=1),  # the outbox loop owns retries and their backoff
}
