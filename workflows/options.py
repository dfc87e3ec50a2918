"""Timeouts and retry policies of every activity, in one place, with the reason for each."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TypedDict

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

from domain.limits import FollowTuning
from protocol.errors import ErrorType


class LocalActivityOptions(TypedDict, total=False):
    """The options of a local activity (store writes), typed for `execute_local_activity`."""

    start_to_close_timeout: timedelta
    schedule_to_close_timeout: timedelta
    retry_policy: RetryPolicy
    cancellation_type: ActivityCancellationType


class ActivityOptions(LocalActivityOptions, total=False):
    """The options of an activity, typed for `execute_activity` / `start_activity`."""


# Store writes run as local activities: one marker event instead of three plus a workflow task, and
# no round trip through the server. They are idempotent (generation guards; a final outcome never changes),
# so running one again after a lost workflow task is harmless.
# A store write must eventually happen (a finalization is never dropped): retry until the store is back.
STORE_WRITE: LocalActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
}

# Admission answers the caller: give up after half a minute and refuse rather than hang the starter.
ADMISSION_WRITE: LocalActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=10),
    "schedule_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5)),
}


# What an attempt that makes a core call is given beyond HELPER_CHECK_MS, which bounds the HTTP call itself: the
# attempt's other work (its store writes) ends inside it, so the call's own timeout is what cuts a slow core.
CORE_CALL_MARGIN = timedelta(seconds=5)


def core_call_bound(check_ms: int) -> timedelta:
    """The time one attempt of one core call may take."""
    return timedelta(milliseconds=check_ms) + CORE_CALL_MARGIN


def core_call(
    check_ms: int,
    *,
    give_up_after: timedelta | None = None,
    cancellable: bool = False,
) -> ActivityOptions:
    """One core call: HELPER_CHECK_MS bounds the HTTP call, the activity gets a little more.

    `cancellable` calls run beside others and may be cancelled when the helper ends; the helper then waits
    for their end before it completes, so no late result meets a completing workflow task.
    """
    options: ActivityOptions = {
        "start_to_close_timeout": core_call_bound(check_ms),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            non_retryable_error_types=[ErrorType.CORE_REJECTED],
        ),
    }
    if give_up_after is not None:
        options["schedule_to_close_timeout"] = give_up_after
    if cancellable:
        options["cancellation_type"] = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return options


# A cancel asks the core to stop the turn (R7, R21): a few attempts, then the helper takes the failure as a stop
# not confirmed, and the follow and the hard ceiling decide.
CANCEL_ATTEMPTS = 3


def cancel(check_ms: int) -> ActivityOptions:
    """The cancel: a cancellable core call, given up after `CANCEL_ATTEMPTS`."""
    options = core_call(check_ms, cancellable=True)
    options["retry_policy"] = dataclasses.replace(options["retry_policy"], maximum_attempts=CANCEL_ATTEMPTS)
    return options


def first_open(check_ms: int) -> LocalActivityOptions:
    """The open's first attempt, as a local activity: one attempt, bounded like a core call; the helper's task
    waits for it (the task heartbeats while it runs), and a failure goes on as the open activity."""
    options: LocalActivityOptions = {
        "start_to_close_timeout": core_call_bound(check_ms),
        "retry_policy": RetryPolicy(maximum_attempts=1),
        "cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }
    return options


# The reset after the outcome is cleanup (R20): neither the outcome nor the slot waits for it, so it may keep
# trying a core that fails some of its calls, with backoff, for minutes; then the workflow parks the session
# and the hourly sweep tries it again (the park rule: `domain.run.cleanup`).
RESET_BUDGET = timedelta(minutes=5)


def reset(check_ms: int) -> ActivityOptions:
    return {
        "start_to_close_timeout": core_call_bound(check_ms),
        "schedule_to_close_timeout": RESET_BUDGET,
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=30)
        ),
    }


# Finding a session whose create was never answered: after the outcome, without the hard ceiling's time
# pressure, but before the slot passes on (R38). The slot's lease ends 5 minutes after the hard ceiling
# (domain.book.LEASE_MARGIN), so the whole search must end well before that.
RECOVERY_BUDGET = timedelta(minutes=3)


def recovery(check_ms: int) -> ActivityOptions:
    return {
        # The search itself may take a few slow calls (create again, cancel, reset), each bounded. A reset that
        # fails is tried on the next attempts, then the session is parked (`domain.run.cleanup.FOUND_BY_KEY`).
        "start_to_close_timeout": timedelta(milliseconds=6 * check_ms) + timedelta(seconds=10),
        "schedule_to_close_timeout": RECOVERY_BUDGET,
        "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
    }


def follow(check_ms: int, tuning: FollowTuning) -> ActivityOptions:
    """The follow activity: one window per attempt, retried at `resume_ms` from the row.

    No heartbeat timeout: a follow heartbeats only while the core fails (R57), and the replicas' liveness records
    end a dead or frozen replica's attempts (replica.liveness), which the start-to-close timeout bounds should the
    store be unreachable too. The workflow abandons it at the run's end, since a cancel would reach it only with a
    heartbeat: it ends by itself at its next read, the session being over or reset (or at its window's end)."""
    return {
        # A window, plus the last read (a long poll: its wait and HELPER_CHECK_MS) and the writes after it.
        "start_to_close_timeout": timedelta(milliseconds=tuning.window_ms + tuning.wait_ms + 2 * check_ms)
        + timedelta(seconds=30),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=tuning.resume_ms),
            backoff_coefficient=1.0,
            maximum_interval=timedelta(milliseconds=tuning.resume_ms),
        ),
        "cancellation_type": ActivityCancellationType.ABANDON,
    }


CHAT_OFFER: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(maximum_attempts=1),  # the outbox loop owns retries and their backoff
}


# The hourly sweep's activities walk every orphan result directory, and every kept and parked session (each core
# call bounded by HELPER_CHECK_MS): ten minutes bounds an attempt; a failed one is retried with Temporal's default
# backoff for at most 25 minutes, so the sweep's two activities end within its hour and the Schedule, which skips
# a run while the last one goes on, runs the next.
SWEEP: ActivityOptions = {
    "start_to_close_timeout": timedelta(minutes=10),
    "schedule_to_close_timeout": timedelta(minutes=25),
}

# A Goal check's admission answers at once; if Temporal or the store is briefly away, it is tried for a few
# minutes, then the check fails (shown beside the Goal's Schedule).
GOAL_CHECK_ADMISSION: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=10),
}
