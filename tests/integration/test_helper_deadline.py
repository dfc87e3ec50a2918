"""The 45-minute deadline and the 47-minute hard ceiling, on the time-skipping server (R15, R7, R10)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.names import helper_workflow_id
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import eventually, eventually_skipping, helper_request, history_events, settings_for, skip_time
from tests.integration.stack import CLOSED_PORT, time_stack
from worker import running_worker


async def test_deadline_asks_for_partial_and_core_answers_within_grace(time_env: WorkflowEnvironment, tmp_path: Path):
    """R15: at 45 minutes the helper asks for a partial outcome; the core answers within the grace."""
    core = FakeCore(on_finish="partial")
    async with time_stack(time_env, tmp_path, core) as stack:
        client, store = stack.client, stack.store
        admission = await client.start(helper_request("ann", "h1"))
        assert admission.status == "running"
        session = (await eventually(lambda: list(core.sessions.values())))[0]
        session.add_step(1_000, 100, "first findings: the report is in the finance folder")
        await skip_time(time_env, timedelta(minutes=46))
        row = await eventually(lambda: _final_row(store, "ann", "h1"))
        events = await eventually(lambda: _completed_history(time_env, "ann", "h1"))
        # One long follow activity, not a timer loop: the whole 45-minute life fits in a small history.
        assert len(events) <= 50, f"{len(events)} history events"
        assert row.outcome_kind is OutcomeKind.PARTIAL
        assert row.state is RowState.UNREPORTED
        assert core.finish_calls == 1
        assert "deadline of 45 minutes" in (row.summary or "")
        assert "finance folder" in (row.summary or "")


async def _final_row(store: HelperStore, owner: str, helper_id: str):
    row = await store.get(owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def test_hard_ceiling_finalizes_with_last_message_when_core_stays_silent(
    time_env: WorkflowEnvironment, tmp_path: Path
):
    """R15, R7: the core ignores finish-now; at 47 minutes the helper finalizes with the last completed
    message and frees its slot, so a waiting helper starts."""
    core = FakeCore(on_finish="ignore")
    async with time_stack(time_env, tmp_path, core, max_running=1, max_open=2) as stack:
        client, store = stack.client, stack.store
        assert (await client.start(helper_request("bob", "silent"))).status == "running"
        waiting = await client.start(helper_request("bob", "next"))
        assert (waiting.status, waiting.ahead) == ("waiting", 0)
        session = await eventually(lambda: core.sessions.get("fake-1"))
        session.add_step(2_000, 300, "draft ready: three suppliers compared")
        await skip_time(time_env, timedelta(minutes=48))
        row = await eventually(lambda: _final_row(store, "bob", "silent"))
        assert row.outcome_kind is OutcomeKind.PARTIAL
        assert core.finish_calls == 1
        assert "did not finish within 2 minutes" in (row.summary or "")
        assert "three suppliers compared" in (row.summary or "")
        assert row.finished_at is not None and row.started_at is not None
        assert timedelta(minutes=47) <= row.finished_at - row.started_at < timedelta(minutes=48)
        # The freed slot passed to the waiting helper, which created its own session.
        await eventually(lambda: core.create_calls == 2)
        following = core.session_of("next")
        assert following is not None and following.status == "running"
        assert core.reset_calls == 1  # the silent session was reset as cleanup (R20)


async def test_hard_ceiling_holds_when_the_core_is_down(time_env: WorkflowEnvironment, tmp_path: Path):
    """R15, R10: the core goes down mid-session; every call fails fast, and at 47 minutes the helper
    finalizes with the last completed message it saw."""
    core = FakeCore()
    server = serving_fake_core(core)
    core_url = await server.__aenter__()
    settings = settings_for(tmp_path, core_url, CLOSED_PORT, skipping_time=True)
    store = await HelperStore.connect(settings.store, run_migrations=True)
    async with running_worker(time_env.client, settings):
        client = HelperClient(settings, store.reads, time_env.client)
        await client.start(helper_request("cat", "h1", language="ru"))
        session = await eventually(lambda: core.sessions.get("fake-1"))
        session.add_step(1_500, 200, "найдено два договора")
        # The tests' follow window is 100 ms and its retry 60 s of server time: a step that lands between two
        # attempts is seen only once the server has skipped to the next one.
        await eventually_skipping(time_env, lambda: _row_has_steps(store, "cat", "h1"))
        await server.__aexit__(None, None, None)  # the core is down from here on
        await skip_time(time_env, timedelta(minutes=48))
        row = await eventually(lambda: _final_row(store, "cat", "h1"))
    assert row.outcome_kind is OutcomeKind.PARTIAL
    assert "найдено два договора" in (row.summary or "")
    assert "ядро не завершило работу" in (row.summary or "")
    await store.close()


async def _completed_history(env: WorkflowEnvironment, owner: str, helper_id: str):
    events = await history_events(env.client, helper_workflow_id(owner, helper_id))
    return events if events and events[-1].HasField("workflow_execution_completed_event_attributes") else None


async def _row_has_steps(store: HelperStore, owner: str, helper_id: str) -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and row.steps > 0


async def test_closing_while_finishing_after_the_deadline(time_env: WorkflowEnvironment, tmp_path: Path):
    """R21, R7, R15: past the deadline the helper has asked for its partial outcome and waits in the grace;
    the owner closes it: the row closes at once, the core confirms the cancellation, the outcome is closed
    (nothing reported) and the slot passes on before the hard ceiling."""
    core = FakeCore(on_finish="ignore", on_cancel="stop")
    async with time_stack(time_env, tmp_path, core, max_running=1, max_open=2) as stack:
        client, store = stack.client, stack.store
        await client.start(helper_request("dan", "slow"))
        assert (await client.start(helper_request("dan", "next"))).status == "waiting"
        session = await eventually(lambda: core.sessions.get("fake-1"))
        session.add_step(500, 50, "halfway there")
        await skip_time(time_env, timedelta(minutes=45, seconds=30))
        await eventually(lambda: core.finish_calls == 1)
        answer = await client.close("dan", "slow")
        assert answer.state.value == "closed"
        row = await eventually(lambda: _final_row(store, "dan", "slow"))
        assert row.outcome_kind is OutcomeKind.CLOSED and row.state is RowState.CLOSED
        assert row.finished_at is not None and row.started_at is not None
        assert row.finished_at - row.started_at < timedelta(minutes=47)
        await eventually(lambda: core.create_calls == 2)  # the slot passed on
