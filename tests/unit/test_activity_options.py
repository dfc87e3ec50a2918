"""The activities' options: the follow's timeouts (R44, R10), what a dead worker costs in time and a live one in
heartbeats; how long a cancel, a reset, the sweep and a Goal check's admission are tried."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.workflow import ActivityCancellationType

from domain.limits import HELPER_CHECK_MS, FollowTuning
from domain.run.follow import long_poll_wait_ms
from protocol.errors import ErrorType
from workflows import options
from workflows.maintenance import SWEEP_EVERY


def test_with_the_defaults_a_dead_worker_is_noticed_within_two_minutes() -> None:
    """R44: the heartbeat timeout of the default follow is under two minutes."""
    follow = options.follow(HELPER_CHECK_MS, FollowTuning())
    assert follow["heartbeat_timeout"] <= timedelta(minutes=2)


def test_with_the_defaults_a_45_minute_follow_sends_few_heartbeats() -> None:
    """R44: the SDK sends a heartbeat at most every 80 % of the timeout (when the worker's throttle allows it):
    a 45-minute follow's heartbeats stay within the budget of 60 billable actions with room for the rest."""
    timeout = options.follow(HELPER_CHECK_MS, FollowTuning())["heartbeat_timeout"]
    assert timedelta(minutes=45) / (0.8 * timeout) <= 32


@pytest.mark.parametrize("check_ms", [400, 1_000, 15_000, 60_000])
@pytest.mark.parametrize("tuning", [FollowTuning(), FollowTuning(liveness_ms=5_000), FollowTuning(wait_ms=60_000)])
def test_a_read_always_ends_before_the_heartbeat_timeout(check_ms: int, tuning: FollowTuning) -> None:
    """R10, R44: between two heartbeats the follow waits at most one read (its wait plus the check bound), and
    that is shorter than the heartbeat timeout: a live worker is never taken for dead."""
    follow = options.follow(check_ms, tuning)
    longest_read = timedelta(milliseconds=long_poll_wait_ms(tuning, check_ms) + check_ms)
    assert longest_read < follow["heartbeat_timeout"]
    assert follow["start_to_close_timeout"] > timedelta(milliseconds=tuning.window_ms) + longest_read


def test_a_cancel_is_given_up_after_a_few_attempts() -> None:
    """R7, R21: a cancel the core keeps failing ends after `CANCEL_ATTEMPTS` (then the stop is not confirmed and
    the follow decides); a refusal is not tried again."""
    cancel = options.cancel(HELPER_CHECK_MS)
    policy = cancel["retry_policy"]
    assert policy.maximum_attempts == options.CANCEL_ATTEMPTS > 1
    assert policy.non_retryable_error_types == [ErrorType.CORE_REJECTED]
    assert cancel["start_to_close_timeout"] == options.core_call(HELPER_CHECK_MS)["start_to_close_timeout"]
    assert cancel["cancellation_type"] is ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


def test_the_sweep_ends_inside_its_hour() -> None:
    """R29, R20: the sweep's two activities, one after the other, give up before the next sweep is due, so a sweep
    whose store or core stays away never holds the Schedule's next runs back."""
    assert options.SWEEP["start_to_close_timeout"] < options.SWEEP["schedule_to_close_timeout"]
    assert 2 * options.SWEEP["schedule_to_close_timeout"] < SWEEP_EVERY


def test_a_goal_checks_admission_is_tried_for_minutes_not_for_ever() -> None:
    """R30: a Goal check whose admission cannot get through (Temporal or the store away) ends within minutes."""
    check = options.GOAL_CHECK_ADMISSION
    policy = check["retry_policy"]
    assert policy.maximum_attempts == 10
    assert policy.maximum_interval is not None
    longest = policy.maximum_attempts * (check["start_to_close_timeout"] + policy.maximum_interval)
    assert longest <= timedelta(minutes=10)


def test_the_reset_after_the_outcome_is_tried_for_its_budget_then_parked() -> None:
    """R20: the reset is cleanup: retried with backoff, without a count, for RESET_BUDGET (then the workflow parks
    the session)."""
    reset = options.reset(HELPER_CHECK_MS)
    assert reset["schedule_to_close_timeout"] == options.RESET_BUDGET
    assert reset["retry_policy"].maximum_attempts == 0
