"""R48: a starter process bounds the writes it has in flight; the rest wait in order while their bound allows, and
are refused before anything is sent, with a time to ask again that grows with the backlog."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from protocol.deadlines import ReplyBy
from protocol.errors import Busy
from starter.backpressure import RETRY_AFTER_MAX_S, WriteGate, WriteObserver
from tests.virtual_time import in_virtual_time

# Every test runs on a loop whose clock moves only when all its tasks wait (tests.virtual_time): a write that takes
# 0.3 s takes no real time, and what a test measures does not depend on how busy the machine is.


def _now() -> float:
    return asyncio.get_running_loop().time()


def _gate(ceiling: int, answer_within_s: float = 2.0, observe: WriteObserver | None = None) -> WriteGate:
    return WriteGate(ceiling, answer_within_s, observe, clock=asyncio.get_running_loop().time)


def _by(seconds: float) -> ReplyBy:
    """Answered `seconds` from now on the loop's clock."""
    return ReplyBy(_now() + seconds, datetime.now(UTC) + timedelta(seconds=seconds), seconds)


async def _write(gate: WriteGate, by: ReplyBy, hold: asyncio.Event, order: list[int], number: int) -> None:
    async with gate.turn(by):
        order.append(number)
        await hold.wait()


@in_virtual_time
async def test_at_most_the_limit_is_in_flight_and_the_rest_go_in_order() -> None:
    """R48: five writes through a gate of two: two run, three wait, and each freed place goes to the oldest."""
    gate = _gate(2)
    hold = asyncio.Event()
    order: list[int] = []
    tasks = [asyncio.create_task(_write(gate, _by(10), hold, order, n)) for n in range(5)]
    await asyncio.sleep(0.05)
    assert order == [0, 1] and gate.in_flight == 2 and gate.waiting == 3
    hold.set()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert gate.in_flight == 0 and gate.waiting == 0


@in_virtual_time
async def test_a_write_whose_turn_does_not_come_in_time_is_busy_and_nothing_leaks() -> None:
    """R48: a write that waited half its bound is refused (nothing was sent), and its place in the queue is gone."""
    gate = _gate(1)
    hold = asyncio.Event()
    first = asyncio.create_task(_write(gate, _by(10), hold, [], 0))
    await asyncio.sleep(0.01)
    started = _now()
    with pytest.raises(Busy) as refused:
        async with gate.turn(_by(1.0)):
            pytest.fail("it was let through")
    assert _now() - started == pytest.approx(0.5), "it waited half its bound"
    assert refused.value.exit_code == 5 and refused.value.retry_after_s >= 1
    assert "nothing was taken" in refused.value.message
    assert gate.waiting == 0 and gate.in_flight == 1
    hold.set()
    await first
    assert gate.in_flight == 0


@in_virtual_time
async def test_a_write_that_cannot_expect_its_turn_is_refused_at_once() -> None:
    """R48: once the gate knows its pace, a write that would wait longer than its bound allows is refused without
    waiting, before anything is sent."""
    gate = _gate(1)
    for _ in range(3):  # a pace of ten writes a second
        async with gate.turn(_by(10)):
            await asyncio.sleep(0.1)
    hold = asyncio.Event()
    tasks = [asyncio.create_task(_write(gate, _by(10), hold, [], n)) for n in range(30)]
    await asyncio.sleep(0.01)
    started = _now()
    with pytest.raises(Busy):
        async with gate.turn(_by(2.0)):  # one second to wait, with 29 writes ahead
            pass
    assert _now() == started, "it did not wait"
    hold.set()
    await asyncio.gather(*tasks)


@in_virtual_time
async def test_the_time_to_ask_again_grows_with_the_backlog() -> None:
    """R48: retries spread out as the backlog grows, so they do not arrive together; it stays within bounds."""
    gate = _gate(2)
    hold = asyncio.Event()
    seen = []
    tasks = []
    for _ in range(4):
        tasks += [asyncio.create_task(_write(gate, _by(60), hold, [], n)) for n in range(20)]
        await asyncio.sleep(0.01)
        seen.append(gate.promise_retry_s(_by(60)))
    assert seen == sorted(seen) and seen[-1] > seen[0], seen
    assert all(1 <= after <= RETRY_AFTER_MAX_S for after in seen)
    hold.set()
    await asyncio.gather(*tasks)


@in_virtual_time
async def test_a_caller_that_goes_away_while_waiting_leaves_no_place_behind() -> None:
    """R48: a cancelled waiter (its client disconnected) neither holds a place nor blocks the ones behind it."""
    gate = _gate(1)
    hold = asyncio.Event()
    order: list[int] = []
    first = asyncio.create_task(_write(gate, _by(10), hold, order, 0))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(_write(gate, _by(10), hold, order, 1))
    behind = asyncio.create_task(_write(gate, _by(10), hold, order, 2))
    await asyncio.sleep(0.01)
    gone.cancel()
    hold.set()
    await asyncio.gather(first, behind)
    assert order == [0, 2]
    assert gate.in_flight == 0 and gate.waiting == 0


@in_virtual_time
async def test_an_idle_spell_does_not_make_a_burst_look_hopeless() -> None:
    """R48: the pace is the writes' time in flight, not answers per second: after a quiet minute a burst that the gate
    can work off within its bound waits its turn instead of being refused."""
    gate = _gate(4)
    async with gate.turn(_by(10)):
        await asyncio.sleep(0.05)
    await asyncio.sleep(60)  # quiet

    async def write() -> None:
        async with gate.turn(_by(10)):
            await asyncio.sleep(0.05)

    await asyncio.gather(*(write() for _ in range(40)))  # 10 rounds of 4, half a second: no Busy raised


@in_virtual_time
async def test_the_callers_of_a_burst_are_told_to_come_back_one_after_the_other() -> None:
    """R48: each refusal is told a later time than the one before, one answer's time apart at the measured pace,
    so the retries of a burst come back spread instead of together."""
    gate = _gate(2)
    hold = asyncio.Event()
    tasks = [asyncio.create_task(_write(gate, _by(60), hold, [], n)) for n in range(2)]
    await asyncio.sleep(0.01)
    told = [gate.promise_retry_s(_by(4)) for _ in range(12)]
    # Before a measure: a write a second a place, so half a second apart: some 5 s from the first to the last.
    assert told == sorted(told) and told[-1] >= told[0] + 4, told
    hold.set()
    await asyncio.gather(*tasks)


@in_virtual_time
async def test_each_write_that_went_through_reports_its_wait_and_its_time_in_flight() -> None:
    """R51: the gate tells its observer (the service's /metrics) how long each write waited for its place and how
    long it was then in flight, so a burst's time in the service is told from its time in Temporal."""
    reported: list[tuple[float, float]] = []
    gate = _gate(1, observe=lambda waited, sent: reported.append((waited, sent)))
    hold = asyncio.Event()
    first = asyncio.create_task(_write(gate, _by(10), hold, [], 0))
    second = asyncio.create_task(_write(gate, _by(10), hold, [], 1))
    await asyncio.sleep(0.2)
    hold.set()
    await asyncio.gather(first, second)
    first_report, second_report = reported  # (waited, in flight)
    assert first_report == pytest.approx((0, 0.2)), "the first went at once and was in flight while held"
    assert second_report == pytest.approx((0.2, 0)), "the second waited for the first's place"


async def _runtime(gate: WriteGate, writes: int, takes_s: float, by_s: float = 10) -> None:
    """`writes` writes at once through the gate to a runtime that answers each in `takes_s`."""

    async def write() -> None:
        with contextlib.suppress(Busy):  # more than the runtime answers within the bound
            async with gate.turn(_by(by_s)):
                await asyncio.sleep(takes_s)

    await asyncio.gather(*(write() for _ in range(writes)))


@in_virtual_time
async def test_a_runtime_that_answers_quickly_is_given_more_writes_at_once() -> None:
    """R51: while the gate is full and Temporal answers in time, the limit grows past its start (one
    place for every `limit` answers), up to the ceiling, so a runtime with room is not held to a fixed number."""
    gate = _gate(64, answer_within_s=1.0)
    assert gate.limit == 32
    await _runtime(gate, 600, takes_s=0.02)
    assert 32 < gate.limit <= 64, gate.limit


@in_virtual_time
async def test_a_runtime_that_answers_slowly_is_given_fewer_writes_at_once() -> None:
    """R51: when Temporal's answers take longer than a sent write has, the limit falls by a tenth for every `limit`
    answers, so writes wait in the gate, where they can still be refused cleanly, instead of running out of time
    inside Temporal."""
    gate = _gate(256, answer_within_s=0.1)
    await _runtime(gate, 300, takes_s=0.3)
    assert gate.limit < 16, gate.limit


@in_virtual_time
async def test_callers_told_to_come_back_are_taken_when_they_do_and_the_gate_does_not_idle() -> None:
    """R51: a burst larger than the bound allows: the refused callers come back when told (Retry-After) and are
    taken then, not refused again, and the whole burst is worked off at about the runtime's pace."""
    gate = _gate(8, answer_within_s=2.0)  # at most 8 at a time, 0.4 s each: 20 writes a second
    tries: list[int] = []
    told: list[int] = []

    async def caller(number: int) -> None:
        # A microsecond apart, so their waits end in the order they came, as on a real clock (timers due at one
        # moment fire in no set order).
        await asyncio.sleep(number / 1_000_000)
        for attempt in range(1, 4):
            try:
                async with gate.turn(_by(4)):  # 2 s to wait for its turn
                    await asyncio.sleep(0.4)
                tries.append(attempt)
                return
            except Busy as busy:
                told.append(busy.retry_after_s)
                await asyncio.sleep(busy.retry_after_s)
        tries.append(0)

    started = _now()
    await asyncio.gather(*(caller(n) for n in range(100)))
    took = _now() - started
    assert tries.count(0) == 0 and max(tries) == 2, Counter(tries)
    # 5 s of writes; Retry-After is in whole seconds, so the gate may idle up to one before the first come back.
    assert took < 100 / 20 + 1.5, f"the burst took {took:.1f} s at 20 writes a second; told {Counter(told)}"


@in_virtual_time
async def test_a_slow_start_does_not_hold_the_rest_of_the_burst_back() -> None:
    """R51: a cold runtime answers the first writes slowly and the limit falls; once it answers in time again the
    limit climbs back, so the burst is not held to what its first seconds could take."""
    gate = _gate(64, answer_within_s=0.2)
    await _runtime(gate, 100, takes_s=0.3)  # cold: slower than a sent write has
    fallen = gate.limit
    assert fallen < 32, fallen
    await _runtime(gate, 800, takes_s=0.02)  # warm
    assert gate.limit > fallen + 5, (fallen, gate.limit)
