"""Observation by push (R44) with the real worker on the dev server: a core that offers long poll is asked a
few times a minute while nothing changes and its changes show at once; a core without it is polled as before;
a core that advertises it but answers at once is paced, never spun."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from contracts.core_api import SessionStatus
from domain.limits import FollowTuning
from domain.outcome import OutcomeKind
from domain.rows import HelperRow
from reference.chat.server import running_chat
from tests.e2e.conftest import Stack, _stack
from tests.fakes.fake_core import FakeCore, FakeSession, serving_fake_core
from tests.helpers import eventually, helper_request

pytestmark = pytest.mark.e2e

# The defaults of a deployment (20 s long polls, a 100 s heartbeat timeout), but polls of 100 ms for a core
# without long poll and a short window, so a polled core shows what polling costs within seconds.
FOLLOW = FollowTuning(poll_ms=100, window_ms=60_000, resume_ms=200)
IDLE_SECONDS = 45


@contextlib.asynccontextmanager
async def _stack_on(dev_env: WorkflowEnvironment, tmp_path: Path, core: FakeCore) -> AsyncIterator[Stack]:
    async with (
        serving_fake_core(core) as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, follow=FOLLOW, check_ms=2_000) as built,
    ):
        yield built


async def _running_session(stack: Stack, core: FakeCore, helper_id: str) -> FakeSession:
    await stack.client.start(helper_request(stack.owner, helper_id))
    session: FakeSession = await eventually(lambda: core.session_of(helper_id), timeout=20)
    return session


async def _row_shows_steps(stack: Stack, helper_id: str, steps: int) -> bool:
    row = await stack.store.get(stack.owner, helper_id)
    return row is not None and row.steps == steps


async def test_an_idle_helper_costs_a_few_requests_a_minute_and_changes_show_at_once(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R44: with long poll, two running helpers whose sessions do nothing for 45 s are read at most 6 times a
    minute each; a step that lands then shows in the row within a second, not after the next poll."""
    core = FakeCore(long_poll="honest")
    async with _stack_on(dev_env, tmp_path, core) as stack:
        sessions = [await _running_session(stack, core, helper_id) for helper_id in ("idle-1", "idle-2")]
        await eventually(lambda: all(core.reads_by_session.get(s.session_id, 0) >= 2 for s in sessions))
        before = {s.session_id: core.reads_by_session[s.session_id] for s in sessions}
        await asyncio.sleep(IDLE_SECONDS)
        per_minute = {
            s.session_id: (core.reads_by_session[s.session_id] - before[s.session_id]) * 60 / IDLE_SECONDS
            for s in sessions
        }
        print(f"reads a minute per idle helper (long poll): {sorted(per_minute.values())}")
        assert all(rate <= 6 for rate in per_minute.values()), f"reads a minute per idle helper: {per_minute}"
        assert core.long_poll_waits >= 4, "the reads were held by the core"

        sessions[0].add_step(1_000, 100)
        landed = time.monotonic()
        await eventually(lambda: _row_shows_steps(stack, "idle-1", 1), timeout=5, interval=0.01)
        shown_after = time.monotonic() - landed
        print(f"a step shown in the row {shown_after * 1000:.0f} ms after it landed")
        assert shown_after < 1.0, "a change shows at once, not after the next poll"

        for session in sessions:
            session.end(SessionStatus.COMPLETED, "done")
        for helper_id in ("idle-1", "idle-2"):
            row = await eventually(functools.partial(_completed, stack, helper_id), timeout=20)
            assert row.outcome_kind is OutcomeKind.COMPLETED


async def _completed(stack: Stack, helper_id: str) -> HelperRow | None:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def test_a_core_without_long_poll_is_followed_by_polling(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """R44, R11: a core whose snapshots carry no version is read every HELPER_POLL_MS, and the helper follows it
    to its outcome as before."""
    core = FakeCore()
    async with _stack_on(dev_env, tmp_path, core) as stack:
        session = await _running_session(stack, core, "polled")
        await eventually(lambda: core.reads_by_session.get(session.session_id, 0) >= 1)
        start = core.reads_by_session[session.session_id]
        await asyncio.sleep(3)
        reads = core.reads_by_session[session.session_id] - start
        assert 10 <= reads <= 40, f"{reads} reads in 3 s with polls every 100 ms"
        assert core.long_poll_waits == 0
        session.add_step(1_000, 100)
        await eventually(lambda: _row_shows_steps(stack, "polled", 1), timeout=5)
        session.end(SessionStatus.COMPLETED, "done")
        row = await eventually(lambda: _completed(stack, "polled"), timeout=20)
        assert row.outcome_kind is OutcomeKind.COMPLETED


async def test_a_core_that_ignores_the_wait_is_paced_like_a_polled_one(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R44, R37: a core that sends versions but answers every long poll at once is read at the polling pace,
    never in a tight loop, and still followed to its outcome."""
    core = FakeCore(long_poll="ignores_wait")
    async with _stack_on(dev_env, tmp_path, core) as stack:
        session = await _running_session(stack, core, "hasty")
        await eventually(lambda: core.reads_by_session.get(session.session_id, 0) >= 1)
        start = core.reads_by_session[session.session_id]
        await asyncio.sleep(3)
        reads = core.reads_by_session[session.session_id] - start
        assert reads <= 40, f"{reads} reads in 3 s: the follow spun on a core that does not wait"
        session.end(SessionStatus.COMPLETED, "done")
        row = await eventually(lambda: _completed(stack, "hasty"), timeout=20)
        assert row.outcome_kind is OutcomeKind.COMPLETED
