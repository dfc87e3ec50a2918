"""A helper's ending: write the outcome, tell the coordinator, reset the session as cleanup (R8, R18-R20).

On the time-skipping server, with the real worker and the fake core over HTTP: what the ending holds in the
helper's history, and what becomes of a session whose reset the core fails, for a while or for good.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.rows import RowActivities
from activities.session import SessionActivities
from clients.core_client import CoreClient
from domain.messages.activities import Finalize, RowKey, WrittenOutcome
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.names import helper_workflow_id
from store.helper_store import HelperStore
from store.results import ResultDirectories
from tests.fakes.fake_core import DoneAtOnce, FakeCore
from tests.helpers import admitted_row, eventually, helper_request, history_events, local_activity_name, parked_of
from tests.integration.stack import TimeStack, time_stack
from workflows.options import RESET_BUDGET


async def _outcome(store: HelperStore, owner: str, helper_id: str) -> OutcomeKind | None:
    row = await store.get(owner, helper_id)
    return row.outcome_kind if row is not None else None


def _local_activities(events: list[Any]) -> list[str]:
    return [name for name in map(local_activity_name, events) if name is not None]


def _scheduled(events: list[Any]) -> list[str]:
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]


async def _completed(env: WorkflowEnvironment, owner: str, helper_id: str) -> list[Any] | None:
    events = await history_events(env.client, helper_workflow_id(owner, helper_id))
    return events if events and events[-1].HasField("workflow_execution_completed_event_attributes") else None


async def _completed_skipping(stack: TimeStack, owner: str, helper_id: str, budget: timedelta) -> list[Any]:
    """Wait for the helper's workflow to complete, letting the server skip time (reset retries wait on it)."""
    for _ in range(int(budget / timedelta(seconds=20)) + 30):
        events = await _completed(stack.env, owner, helper_id)
        if events is not None:
            return events
        await stack.env.sleep(timedelta(seconds=20))
    raise AssertionError(f"{helper_id} did not complete within {budget} of skipped time")


async def _finished_quickly(stack: TimeStack, helper_id: str) -> str:
    """Start a helper whose session completes at its create (the core's `DoneAtOnce`, so no follow attempt waits
    on a retry's backoff, which this server skips only while a test waits on it); returns the session's id once
    the outcome is written."""
    await stack.client.start(helper_request("ida", helper_id))
    await eventually(lambda: _outcome(stack.store, "ida", helper_id))
    row = await stack.store.get("ida", helper_id)
    assert row is not None and row.session_id is not None
    return row.session_id


async def test_a_quick_helper_writes_its_outcome_passes_its_slot_on_and_resets_its_session(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R8, R18-R20: a session that completes at once: the outcome is written, the coordinator frees the slot
    (the next helper runs), the session is reset. The history holds the open and the outcome's write as local
    activities, the follow and the reset as activities, and the finished notice as one signal."""
    core = FakeCore(sessions=DoneAtOnce({"h1"}))
    async with time_stack(time_env, tmp_path, core, max_running=1) as stack:
        await _finished_quickly(stack, "h1")
        await stack.client.start(helper_request("ida", "h2"))  # runs: h1's slot came back
        await eventually(functools.partial(core.session_of, "h2"))
        events = await eventually(lambda: _completed(time_env, "ida", "h1"), timeout=30)
    assert await _outcome(stack.store, "ida", "h1") is OutcomeKind.COMPLETED
    assert _local_activities(events) == ["open_session", "finalize_outcome"]
    assert _scheduled(events)[-1] == "reset_session" and "follow_session" not in _scheduled(events)[1:]
    signals = [e for e in events if e.HasField("signal_external_workflow_execution_initiated_event_attributes")]
    assert len(signals) == 1
    assert core.reset_calls == 1 and core.session_of("h1") is None


@pytest.mark.parametrize(
    "failing",
    [{"fail_next": {"reset": 6}}, {"fail_every_other": {"reset"}}],
    ids=["the first six resets fail", "every other call fails"],
)
async def test_a_reset_against_a_failing_core_keeps_trying_with_backoff_and_gets_through(
    time_env: WorkflowEnvironment, tmp_path: Path, failing: dict[str, Any]
) -> None:
    """R20: a core that fails the reset six times in a row (a minute of backoff) or every other call still gets
    the session reset: the reset is retried with backoff for minutes and the session is not parked. (Three
    tries and then a park would leave the first core's session parked.)"""
    core = FakeCore(sessions=DoneAtOnce({"h1"}), **failing)
    async with time_stack(time_env, tmp_path, core) as stack:
        await _finished_quickly(stack, "h1")
        await _completed_skipping(stack, "ida", "h1", RESET_BUDGET)
        parked = await parked_of(stack.store, "ida")
    assert parked == []
    assert core.session_of("h1") is None, "the session was reset"
    assert core.reset_calls >= 2


async def test_a_reset_that_keeps_failing_parks_the_session_after_minutes_and_the_sweep_resets_it_later(
    time_env: WorkflowEnvironment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """R20: a core that fails every reset: the outcome and the slot do not wait (the next helper runs); the
    reset is tried for RESET_BUDGET, with backoff, then the session is parked and logged. Once the core is
    back, the hourly sweep's `reset_kept_sessions` resets the parked session and it is no longer parked."""
    core = FakeCore(sessions=DoneAtOnce({"h1"}), reset_fails=True)
    async with time_stack(time_env, tmp_path, core, max_running=1) as stack:
        session_id = await _finished_quickly(stack, "h1")
        await stack.client.start(helper_request("ida", "h2"))
        await eventually(functools.partial(core.session_of, "h2"))  # the slot passed on before the reset ended
        with caplog.at_level(logging.WARNING):
            events = await _completed_skipping(stack, "ida", "h1", 2 * RESET_BUDGET)
        parked = await parked_of(stack.store, "ida")
        calls_while_trying = core.reset_calls
        finalized = next(e for e in events if local_activity_name(e) == "finalize_outcome")
        park = next(e for e in events if local_activity_name(e) == "park_session")
        core.reset_fails = False
        client = CoreClient(stack.settings.core_url, stack.settings.policy.check_ms)
        try:
            sweep = SessionActivities(stack.store, client)
            swept = await ActivityEnvironment().run(sweep.reset_kept_sessions)
        finally:
            await client.aclose()
        still_parked = await parked_of(stack.store, "ida")
    tried_for = park.event_time.ToDatetime() - finalized.event_time.ToDatetime()
    assert [p.session_id for p in parked] == [session_id]
    assert tried_for >= RESET_BUDGET - timedelta(seconds=40), tried_for
    assert calls_while_trying >= 6, "retried with backoff, not three times"
    assert any("parking it" in record.getMessage() for record in caplog.records)
    assert swept == 1 and still_parked == [] and core.session_of("h1") is None


async def test_a_finalization_run_again_keeps_the_first_outcome(tmp_path: Path) -> None:
    """R19: a workflow task that ran its local activities is lost (the worker died before completing it), and
    its retry runs them anew in another world: the session the first run reset is gone, so the retry decides
    "interrupted". The row, its files and the workflow keep the first outcome, written once."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    results = ResultDirectories(tmp_path / "results")
    rows = RowActivities(store, results)
    env = ActivityEnvironment()
    now = datetime.now(UTC)
    directory = results.path_for("vic", "h1", 1)
    await store.insert_admitted(
        admitted_row("vic", "h1", at=now, result_dir=directory, state=RowState.RUNNING, generation=2)
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
        usage = await store.reads.usage("vic")
    finally:
        await store.close()
    assert first.applied and first.already is None
    assert not again.applied and again.already == WrittenOutcome(kind=OutcomeKind.COMPLETED, explanation="")
    assert row is not None and row.outcome_kind is OutcomeKind.COMPLETED
    assert await asyncio.to_thread((directory / "outcome.md").read_text) == text
    assert [line.outcome_kind for line in usage] == [OutcomeKind.COMPLETED]
