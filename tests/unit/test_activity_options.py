"""The follow's timeouts (R44, R10): what a dead worker costs in time and a live one in heartbeats."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.follow import long_poll_wait_ms
from domain.limits import HELPER_CHECK_MS, FollowTuning
from workflows import options


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
