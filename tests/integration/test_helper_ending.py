"""A helper's ending is one local activity: the outcome, the notice, the reset's first try (R18-R20).

On the time-skipping server, with the real worker and the fake core over HTTP: what the ending costs the
helper's history, and what happens when the reset in it fails or hangs.
"""

from __future__ import annotations

import asyncio
import functools
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.rows import RowActivities
from activities.session import CLEANUP_ATTEMPTS, FIRST_RESET_MAX_S
from contracts.core_api import SessionStatus
from domain.activity_io import Finalize, RowKey, WrittenOutcome
from domain.limits import Limits
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from protocol.names import helper_workflow_id
from store.helper_store import HelperStore
from store.results import ResultDirectories
from tests.fakes.fake_core import FakeCore
from tests.helpers import eventually, helper_request, history_events, local_activity_name
from tests.integration.stack import time_stack


async def _outcome(store: HelperStore, owner: str, helper_id: str) -> OutcomeKind | None:
    row = await store.get(owner, helper_id)
    return row.outcome_kind if row is not None else None


def _local_activities(events: list[Any]) -> list[str]:
    return [name for name in map(local_activity_name, events) if name is not None]


async def _completed(env: WorkflowEnvironment, owner: str, helper_id: str) -> list[Any] | None:
    events = await history_events(env.client, helper_workflow_id(owner, helper_id))
    return events if events and events[-1].HasField("workflow_execution_completed_event_attributes") else None


async def test_a_quick_helper_ends_in_one_local_activity_after_its_open(time_env: WorkflowEnvironment, tmp_path: Path):
    """R18-R20: a session that completes at once: the helper's history has the open and the ending, nothing
    else; the outcome is written, the coordinator frees the slot (the next helper runs), the session is reset."""
    core = FakeCore()
    async with time_stack(time_env, tmp_path, core) as stack:
        await stack.client.start(helper_request("ida", "h1"))
        session = await eventually(functools.partial(core.session_of, "h1"))
        session.add_step(100, 10, "done")
        session.end(SessionStatus.COMPLETED)
        events = await eventually(lambda: _completed(time_env, "ida", "h1"), timeout=30)
        assert await _outcome(stack.store, "ida", "h1") is OutcomeKind.COMPLETED
        await stack.client.start(helper_request("ida", "h2"))  # runs: h1's slot came back
        await eventually(functools.partial(core.session_of, "h2"))
    assert _local_activities(events) == ["open_session", "finalize_and_hand_back"]
    assert core.reset_calls == 1


async def test_a_failing_reset_is_retried_by_reset_session_and_parks_the_session(
    time_env: WorkflowEnvironment, tmp_path: Path
):
    """R20: the reset's first try in the ending fails (the core answers 503); the outcome and the slot do not
    wait for it, reset_session retries it and parks the session after its attempts."""
    core = FakeCore(misbehave="503", misbehave_on={"reset"})
    async with time_stack(time_env, tmp_path, core) as stack:
        await stack.client.start(helper_request("ida", "h1"))
        session = await eventually(functools.partial(core.session_of, "h1"))
        session.add_step(100, 10, "done")
        session.end(SessionStatus.COMPLETED)
        await eventually(lambda: _outcome(stack.store, "ida", "h1"))
        await stack.client.start(helper_request("ida", "h2"))
        await eventually(functools.partial(core.session_of, "h2"))  # the slot passed on before the reset ended
        events = await eventually(lambda: _completed(time_env, "ida", "h1"), timeout=60)
        parked = await stack.store.parked("ida")
    assert _local_activities(events)[:2] == ["open_session", "finalize_and_hand_back"]
    assert "reset_session" in _local_activities(events)
    assert core.reset_calls >= 1 + CLEANUP_ATTEMPTS  # the first try, then reset_session's attempts
    assert [p.helper_id for p in parked] == ["h1"]


async def test_a_hanging_reset_holds_the_ending_no_longer_than_its_bound(time_env: WorkflowEnvironment, tmp_path: Path):
    """R20, R10: a core whose reset never answers holds the ending's first try for at most FIRST_RESET_MAX_S
    (or HELPER_CHECK_MS, if shorter), so the ending's activity never times out and repeats its write."""
    core = FakeCore(misbehave="hang", misbehave_on={"reset"})
    async with time_stack(time_env, tmp_path, core, check_ms=30_000) as stack:
        await stack.client.start(helper_request("ida", "h1"))
        session = await eventually(functools.partial(core.session_of, "h1"))
        session.add_step(100, 10, "done")
        started = time.monotonic()
        session.end(SessionStatus.COMPLETED)
        await eventually(lambda: _outcome(stack.store, "ida", "h1"))
        finalized_after = time.monotonic() - started
        await eventually(lambda: core.reset_calls >= 2, timeout=FIRST_RESET_MAX_S + 10)
        reset_session_after = time.monotonic() - started
    assert finalized_after < FIRST_RESET_MAX_S  # the outcome is written before the reset is tried
    assert reset_session_after < FIRST_RESET_MAX_S + 5  # the first try gave up at its bound


async def test_a_finalization_run_again_keeps_the_first_outcome(tmp_path: Path) -> None:
    """R19: a workflow task that ran its local activities is lost (the worker died before completing it), and
    its retry runs them anew in another world: the session the first run reset is gone, so the retry decides
    "interrupted". The row, its files and the workflow keep the first outcome, written once."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    results = ResultDirectories(tmp_path / "results")
    rows = RowActivities(store, results, keep_ms=86_400_000)
    env = ActivityEnvironment()
    now = datetime.now(UTC)
    directory = results.path_for("vic", "h1", 1)
    await store.insert_admitted(
        HelperRow(
            owner="vic",
            helper_id="h1",
            seq=1,
            state=RowState.RUNNING,
            task="Find the Q3 report",
            language="en",
            model="scripted",
            limits=Limits(),
            result_dir=str(directory),
            admitted_at=now,
            generation=2,
            updated_at=now,
        )
    )

    def final(kind: OutcomeKind, explanation: str) -> Finalize:
        return Finalize(
            row=RowKey(owner="vic", helper_id="h1", seq=1, generation=3),
            kind=kind,
            state=RowState.UNREPORTED,
            language="en",
            model="scripted",
            explanation=explanation,
            summary_max=1_500,
            finished_at=now,
        )

    try:
        first = await env.run(rows.finalize_outcome, final(OutcomeKind.COMPLETED, ""))
        text = await asyncio.to_thread((directory / "outcome.md").read_text)
        again = await env.run(rows.finalize_outcome, final(OutcomeKind.INTERRUPTED, "the core lost the session"))
        row = await store.get("vic", "h1")
        usage = await store.usage("vic")
    finally:
        await store.close()
    assert first.applied and first.already is None
    assert not again.applied and again.already == WrittenOutcome(kind=OutcomeKind.COMPLETED, explanation="")
    assert row is not None and row.outcome_kind is OutcomeKind.COMPLETED
    assert await asyncio.to_thread((directory / "outcome.md").read_text) == text
    assert [line.outcome_kind for line in usage] == [OutcomeKind.COMPLETED]
