"""The park rule (R20): a session whose cleanup reset failed is parked for the hourly sweep once the cleanup's
budget is spent, and tried again by that cleanup until then."""

from __future__ import annotations

from datetime import timedelta

from domain.run.cleanup import FOUND_BY_KEY, KEPT, Budget, parks
from domain.run.kept_sessions import KEPT_AT_MOST


def test_a_session_found_by_its_key_is_parked_on_the_recoverys_last_attempt() -> None:
    """R38, R20: the recovery's reset is tried again on its next attempts; on the last it parks the session, so the
    slot it holds passes on after a few attempts, not after every one the recovery has."""
    assert FOUND_BY_KEY.attempts is not None
    tries = [parks(FOUND_BY_KEY, attempt=attempt) for attempt in range(1, FOUND_BY_KEY.attempts + 1)]
    assert tries == [False] * (FOUND_BY_KEY.attempts - 1) + [True]


def test_a_kept_session_whose_reset_fails_stays_kept_until_long_after_it_may_be_kept() -> None:
    """R20: the sweep tries a failing kept session hourly; it is parked only once it is well past the longest a
    follow-up may wait for it."""
    assert not parks(KEPT, tried_for=KEPT_AT_MOST)
    assert not parks(KEPT, tried_for=2 * KEPT_AT_MOST - timedelta(seconds=1))
    assert parks(KEPT, tried_for=2 * KEPT_AT_MOST)


def test_either_part_of_a_budget_spent_parks() -> None:
    both = Budget(attempts=3, time=timedelta(minutes=5))
    assert not parks(both, attempt=2, tried_for=timedelta(minutes=4))
    assert parks(both, attempt=3, tried_for=timedelta(minutes=1))
    assert parks(both, attempt=1, tried_for=timedelta(minutes=5))
    assert not parks(Budget(), attempt=100, tried_for=timedelta(days=100)), "no budget: never parked"
