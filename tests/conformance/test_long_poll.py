"""Long poll (R44), the contract's optional push: a core whose snapshots carry `version` holds a read with
`after=<that version>&wait_ms=N` until the snapshot changes or N ms have passed.

A core without `version` is polled by the runtime, so these checks are skipped for it; the reference core
must pass them.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from contracts.core_api import SessionStatus, Snapshot
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}


async def _versioned(core: CoreUnderTest, session_id: str, core_is_reference: bool) -> Snapshot:
    snapshot = await core.snapshot(session_id)
    if snapshot.version is None:
        assert not core_is_reference, "the reference core versions its snapshots (R44)"
        pytest.skip("this core's snapshots carry no version: it is polled, long poll is not offered")
    return snapshot


async def _long_poll(core: CoreUnderTest, session_id: str, after: int, wait_ms: int) -> tuple[Snapshot, float]:
    started = time.monotonic()
    response = await core.read(session_id, after=after, wait_ms=wait_ms)
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    return core.observe(session_id, response.json()), elapsed


async def test_a_read_of_an_unchanged_snapshot_waits_for_the_wait(core: CoreUnderTest, core_is_reference: bool) -> None:
    """R44: nothing changes in a paused session, so a read with its version waits `wait_ms`, then answers the
    same snapshot."""
    session_id = await core.create(scripted_task("Pause", steps=1, end="question", **QUICK))
    await core.settled(session_id)
    paused = await _versioned(core, session_id, core_is_reference)
    assert paused.version is not None

    again, elapsed = await _long_poll(core, session_id, after=paused.version, wait_ms=600)

    assert again == paused
    assert 0.5 <= elapsed < 5, f"the read came back after {elapsed:.2f} s, not after about 0.6 s"


async def test_a_read_answers_at_once_when_the_caller_is_behind(core: CoreUnderTest, core_is_reference: bool) -> None:
    """R44: a version other than the current one is answered without waiting."""
    session_id = await core.create(scripted_task("Behind", steps=2, **QUICK))
    await core.settled(session_id)
    ended = await _versioned(core, session_id, core_is_reference)
    assert ended.status is SessionStatus.COMPLETED and ended.version is not None

    current, elapsed = await _long_poll(core, session_id, after=ended.version + 1_000, wait_ms=10_000)

    assert current == ended
    assert elapsed < 5, f"a caller behind the snapshot waited {elapsed:.2f} s"


async def test_a_waiting_read_answers_when_the_session_changes(core: CoreUnderTest, core_is_reference: bool) -> None:
    """R44: a read held on a running session comes back with the change as soon as the next step lands, long
    before its wait ends; every change has a new version."""
    session_id = await core.create(
        scripted_task("Slow steps", steps=3, step_ms=400, input_tokens=1000, input_growth=500)
    )
    first = await _versioned(core, session_id, core_is_reference)
    versions = [first.version]
    seen = first
    while seen.status is SessionStatus.RUNNING:
        assert seen.version is not None
        changed, elapsed = await _long_poll(core, session_id, after=seen.version, wait_ms=10_000)
        assert elapsed < 5, f"a change took {elapsed:.2f} s to come back from a 10 s wait"
        if changed != seen:
            assert changed.version != seen.version, "a changed snapshot carries a new version"
            versions.append(changed.version)
        seen = changed
    assert seen.status is SessionStatus.COMPLETED and len(seen.steps) == 3
    assert len(versions) >= 3, f"the steps were not seen one by one: versions {versions}"


async def test_a_waiting_read_of_a_reset_session_answers_not_found(
    core: CoreUnderTest, core_is_reference: bool
) -> None:
    """R44, R20: a reset while a read waits ends the wait with 404, as any read of a reset session."""
    session_id = await core.create(scripted_task("Reset while read", steps=1, end="question", **QUICK))
    await core.settled(session_id)
    paused = await _versioned(core, session_id, core_is_reference)
    assert paused.version is not None

    waiting = asyncio.create_task(core.read(session_id, after=paused.version, wait_ms=8_000))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    reset = await core.http.post(f"/v1/sessions/{session_id}/reset")
    assert reset.status_code == 200, reset.text
    response = await waiting
    core.forget(session_id)

    assert response.status_code == 404, response.text
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("params", [{"wait_ms": -1}, {"wait_ms": 600_000}, {"after": -3}], ids=str)
async def test_wait_and_version_out_of_range_are_refused(
    core: CoreUnderTest, core_is_reference: bool, params: dict[str, int]
) -> None:
    """R44: a wait longer than 60 s or a negative one, or a negative version, is refused with a Problem."""
    session_id = await core.create(scripted_task("Bad long poll", steps=1, **QUICK))
    await core.settled(session_id)
    await _versioned(core, session_id, core_is_reference)

    problem = check_problem(await core.read(session_id, **{"after": 1, "wait_ms": 100, **params}))

    assert any(name in problem.message for name in params), problem.message
