"""R48: every write carries the moment after which Temporal must not take it, so "not taken" stays true."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.settings import Settings
from protocol.deadlines import ACCEPT_GRACE, ReplyBy, accept_by_of, reply_by, too_late


def test_an_update_id_carries_its_accept_by_time() -> None:
    """R48: the id names the accept-by time, the grace before the answer is due."""
    by = ReplyBy.within(10)
    update_id = by.update_id("admit", "report-q3")
    assert update_id.startswith("admit/report-q3/by-")
    accept_by = accept_by_of(update_id)
    assert accept_by is not None
    assert abs((by.wall - ACCEPT_GRACE - accept_by).total_seconds()) < 0.002
    assert by.update_id("admit", "report-q3") != update_id, "fresh ids: a repeat reaches the handler"


def test_a_short_bound_keeps_a_third_of_itself_as_grace() -> None:
    """R48: a 3 s bound still leaves time to send: its accept-by time is 1 s before its answer."""
    by = ReplyBy.within(3)
    assert abs((by.wall - by.accept_by).total_seconds() - 1.0) < 0.001


def test_ids_without_a_stamp_carry_no_time() -> None:
    """R48: a raw client's id, a turn that looks like a stamp, or a stamp beyond a datetime, is never too late."""
    now = datetime.now(UTC)
    for update_id in (
        "",
        "x",
        "a2b3c4",
        "mark_read/anna/3f2e",
        "mark_read/by-1/uuid/x",
        "admit/x/by-99999999999999999/u",
    ):
        assert accept_by_of(update_id) is None, update_id
        assert not too_late(update_id, now)
    assert accept_by_of("mark_read/by-1/uuid") is not None  # the stamp is read from the right, whatever the subject


def test_an_update_reaching_its_coordinator_after_its_accept_by_time_is_too_late() -> None:
    """R48: the coordinator's clock after the accept-by time means the caller was told nothing was taken."""
    by = ReplyBy.within(10)
    update_id = by.update_id("close_helper", "anna")
    stamped = accept_by_of(update_id)
    assert stamped is not None
    assert not too_late(update_id, by.wall - timedelta(seconds=10)), "at once"
    assert not too_late(update_id, stamped)
    assert too_late(update_id, stamped + timedelta(milliseconds=1))


def test_without_stamps_nothing_is_too_late() -> None:
    """R48: HELPER_STARTER_ACCEPT_BY=false (a server whose clock runs ahead, the time-skipping one) stamps nothing."""
    settings = Settings(starter_accept_by=False, starter_timeout_ms=10_000)
    update_id = reply_by(settings).update_id("admit", "x")
    assert accept_by_of(update_id) is None
    assert not too_late(update_id, datetime.now(UTC) + timedelta(days=1))


def test_a_write_waits_for_its_turn_at_most_half_its_bound() -> None:
    """R48: the rest of the bound is Temporal's, so a write sent late still has time to be accepted."""
    by = ReplyBy.within(10)
    asked = by.monotonic - 10  # read at the moment it was asked, however long the test has taken since
    assert by.left(asked) == pytest.approx(10) and by.left_to_wait(asked) == pytest.approx(5)
    assert by.left_to_wait(asked + 4) == pytest.approx(1)
    assert by.left_to_wait(asked + 6) == 0.0 and by.left(asked + 6) == pytest.approx(4)
    assert by.left(asked + 11) == 0.0
