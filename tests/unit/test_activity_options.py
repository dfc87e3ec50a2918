"""The activities' options: the follow's timeouts (R44, R10, R57) and what a live follow costs in attempts; how long
a cancel, a reset, the sweep and a Goal check's admission are tried."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.workflow import ActivityCancellationType

from domain.limits import HELPER_CHECK_MS, FollowTuning
from protocol.errors import ErrorType
from workflows import options
from workflows.maintenance import SWEEP_EVERY


def test_a_follow_has_no_heartbeat_timeout_and_is_abandoned_at_the_runs_end() -> None:
    """R57: a follow heartbeats only while the core fails, so a heartbeat timeout would end a healthy attempt; a
    cancel would reach it only with a heartbeat, so the run abandons it (it ends by itself at its next read)."""
    follow = options.follow(HELPER_CHECK_MS, FollowTuning())
    assert "heartbeat_timeout" not in follow
    assert follow["cancellation_type"] is ActivityCancellationType.ABANDON


def test_a_45_minute_follow_takes_two_attempts() -> None:
    """R57: each retry of a follow is a billable action; a 45-minute helper's follow is two windows."""
    assert timedelta(minutes=45) / timedelta(milliseconds=FollowTuning().window_ms) <= 2


@pytest.mark.parametrize("check_ms", [400, 1_000, 15_000, 60_000])
@pytest.mark.parametrize("tuning", [FollowTuning(), FollowTuning(wait_ms=60_000), FollowTuning(window_ms=1_000)])
def test_an_attempt_ends_its_window_and_last_read_before_it_times_out(check_ms: int, tuning: FollowTuning) -> None:
    """R10, R44: a window, then at most one more read (its wait plus the check bound) and the writes after it, end
    inside the attempt's start-to-close timeout: a live follow is never timed out, it ends its window itself."""
    follow = options.follow(check_ms, tuning)
    longest_read = timedelta(milliseconds=tuning.wait_ms + check_ms)
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
