"""The worker's limits that follow from its slots: the file descriptors it needs."""

from __future__ import annotations

import resource

from config.settings import Settings
from worker import DESCRIPTORS_BESIDE_CONNECTIONS, descriptor_limit_plan, descriptors_needed

UNLIMITED = resource.RLIM_INFINITY


def test_a_full_worker_needs_a_connection_per_slot_and_some_files_of_its_own() -> None:
    settings = Settings(max_concurrent_follows=2_000, max_concurrent_activities=100)
    assert descriptors_needed(settings) == 2_000 + 2 * 100 + DESCRIPTORS_BESIDE_CONNECTIONS


def test_a_soft_limit_below_the_need_is_raised_to_the_need_when_the_hard_limit_allows() -> None:
    assert descriptor_limit_plan(2_456, soft=1_024, hard=1_048_576) == (2_456, None)
    assert descriptor_limit_plan(2_456, soft=1_024, hard=UNLIMITED) == (2_456, None)


def test_a_limit_that_already_fits_is_left_alone() -> None:
    assert descriptor_limit_plan(2_456, soft=20_000, hard=20_000) == (None, None)
    assert descriptor_limit_plan(2_456, soft=UNLIMITED, hard=UNLIMITED) == (None, None)


def test_a_hard_limit_below_the_need_raises_the_soft_one_as_far_as_it_goes_and_names_what_to_change() -> None:
    new_soft, warning = descriptor_limit_plan(2_456, soft=1_024, hard=2_048)
    assert new_soft == 2_048
    assert warning is not None and "HELPER_MAX_CONCURRENT_FOLLOWS" in warning and "2456" in warning
    assert descriptor_limit_plan(2_456, soft=2_048, hard=2_048)[0] is None
