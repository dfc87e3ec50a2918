"""Every way a helper ends, on the dev server with real HTTP (R16-R24)."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from pathlib import Path

import httpx
import pytest

from contracts.core_api import SessionStatus
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import HelperRefused
from protocol.names import helper_workflow_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.inputs import delivered_request, read_request
from tests.e2e.conftest import Stack, _stack
from tests.fakes.fake_core import FakeCore
from tests.helpers import ChatEvent, chat_events, eventually, helper_request, parked_of

pytestmark = pytest.mark.e2e


async def _final(stack: Stack, helper_id: str):
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def _workflow_ended(stack: Stack, helper_id: str, status: str = "COMPLETED") -> bool:
    description = await stack.env.client.get_workflow_handle(helper_workflow_id(stack.owner, helper_id)).describe()
    return description.status is not None and description.status.name == status


async def test_authorization_wait_is_cancelled_and_says_what_is_needed(stack: Stack):
    """R17: an authorization wait ends by a cleanup cancel, with an outcome naming the authorization."""
    task = scripted_task("Pay the invoice.", steps=2, step_ms=50, end="authorization", authorization="pay invoice 1044")
    await stack.client.start(helper_request(stack.owner, "pay", task))
    row = await eventually(lambda: _final(stack, "pay"), timeout=20)
    assert row.outcome_kind is OutcomeKind.AUTHORIZATION
    assert "needs authorization: pay invoice 1044" in (row.summary or "")
    assert row.state is RowState.UNREPORTED


async def test_a_failing_turn_gives_a_failed_outcome(stack: Stack):
    """R18: the core's failure becomes a failed outcome with the error text."""
    task = scripted_task("Fetch the exchange rates.", steps=1, step_ms=50, end="fail", error="provider timed out")
    await stack.client.start(helper_request(stack.owner, "rates", task))
    row = await eventually(lambda: _final(stack, "rates"), timeout=20)
    assert row.outcome_kind is OutcomeKind.FAILED
    assert "provider timed out" in (row.summary or "")


async def test_core_restart_mid_session_gives_interrupted_and_replays_nothing(dev_env, tmp_path: Path):
    """R24: a core restarted mid-session turns the running helper into `interrupted`; nothing is replayed:
    the core holds exactly one session for the helper, and the outcome (in Russian) says to ask again."""
    db = tmp_path / "core.sqlite3"
    task = scripted_task("Reconcile the ledger.", end="run", steps=80, step_ms=200)
    async with running_chat() as chat_url:
        first_core = running_core(db)
        core_url = await first_core.__aenter__()
        port = int(core_url.rsplit(":", 1)[1])
        async with _stack(dev_env, tmp_path, core_url, chat_url) as stack:
            await stack.client.start(helper_request(stack.owner, "ledger", task, language="ru"))
            await eventually(lambda: _steps(stack, "ledger", 2), timeout=20)
            await first_core.__aexit__(None, None, None)  # the core stops like a killed process ...
            async with running_core(db, port):  # ... and comes back on the same file and port
                row = await eventually(lambda: _final(stack, "ledger"), timeout=30)
                assert row.outcome_kind is OutcomeKind.INTERRUPTED
                assert "Ничего не повторялось" in (row.summary or "")
                await eventually(lambda: _workflow_ended(stack, "ledger"), timeout=20)
    with sqlite3.connect(db) as connection:
        sessions = connection.execute("SELECT COUNT(*) FROM sessions WHERE helper_id = 'ledger'").fetchone()[0]
    assert sessions == 1


async def _steps(stack: Stack, helper_id: str, at_least: int) -> bool:
    row = await stack.store.get(stack.owner, helper_id)
    return row is not None and row.steps >= at_least


async def test_close_while_waiting_never_creates_a_session(fake_stack: tuple[Stack, FakeCore]):
    """R21, R7: a helper closed while waiting for a slot is closed at once and never reaches the core;
    the running helper closed before it keeps its slot while the core has not confirmed the stop."""
    stack, core = fake_stack
    core.on_cancel = "later"  # the core never confirms: closed helpers keep their slots
    owner = stack.owner
    for helper_id in ("a", "b", "c"):
        await stack.client.start(helper_request(owner, helper_id))
    await eventually(lambda: core.create_calls == 3)
    assert (await stack.client.close(owner, "a")).slot_held
    late = await stack.client.start(helper_request(owner, "late"))
    assert (late.status, late.ahead) == ("waiting", 0)
    answer = await stack.client.close(owner, "late")
    assert answer.state is RowState.CLOSED and not answer.slot_held
    row = await eventually(lambda: _final(stack, "late"))
    assert row.outcome_kind is OutcomeKind.CLOSED and row.session_id is None
    assert core.create_calls == 3
    still_stopping = await stack.store.get(owner, "a")
    assert still_stopping is not None and still_stopping.outcome_kind is None


async def test_closing_ready_withdraws_the_report_and_closing_delivered_removes_the_row(stack: Stack):
    """R22, R23, R29: closing an unreported outcome withdraws its automatic report (the chat is never told);
    closing a delivered helper without a Goal removes its row and result directory at once."""
    owner = stack.owner
    async with httpx.AsyncClient() as http:
        await http.put(f"{stack.chat_url}/v1/owners/{owner}/idle", json={"idle": False})  # the chat is busy
        for helper_id in ("ready", "told"):
            await stack.client.start(helper_request(owner, helper_id, scripted_task("Look.", steps=1, step_ms=20)))
        for helper_id in ("ready", "told"):
            await eventually(functools.partial(_final, stack, helper_id))
        closed = await stack.client.close(owner, "ready")
        assert closed.state is RowState.CLOSED and not closed.removed

        # An offer already under way when the close landed carries what it was given (the chat cannot be un-told);
        # offers go one at a time, so once one made after the close was refused as busy, none carries "ready".
        async def offered_without_ready() -> bool:
            return any(e.helper_ids == ["told"] and e.state == "pending" for e in await chat_events(stack.store, owner))

        await eventually(offered_without_ready, timeout=30)
        await http.put(f"{stack.chat_url}/v1/owners/{owner}/idle", json={"idle": True})
        events = await eventually(stack.chat_events, timeout=30)
    told = {h for event in events for h in event["helper_ids"]}
    assert told == {"told"}
    assert {v.helper_id for v in await stack.client.unreported(owner)} == {"told"}

    await stack.client.read(read_request(owner, "turn-1", ["told"]))
    await stack.client.delivered(delivered_request(owner, "turn-1", answer_chars=10))
    directory = Path((await stack.client.show(owner, "told")).result_dir)
    assert (directory / "outcome.md").exists()
    removed = await stack.client.close(owner, "told")
    assert removed.removed
    assert await stack.store.get(owner, "told") is None
    assert not await asyncio.to_thread(directory.exists)
    with pytest.raises(HelperRefused):
        await stack.client.show(owner, "told")


async def test_a_failing_reset_touches_neither_outcome_nor_slot_and_is_tried_until_the_core_takes_it(
    fake_stack: tuple[Stack, FakeCore],
):
    """R20: the reset after finalizing is cleanup: while the core fails it, the outcome stands and the slot
    passes on, and the reset is tried again with backoff; once the core takes it, the session is reset and
    nothing is parked. (Parking after the reset's budget of minutes: tests/integration/test_helper_ending.py.)"""
    stack, core = fake_stack
    core.reset_fails = True
    owner = stack.owner
    await stack.client.start(helper_request(owner, "p"))
    session = await eventually(lambda: core.sessions.get("fake-1"))
    session.add_step(100, 10, "all done")
    session.end(SessionStatus.COMPLETED, "the answer is 42")
    row = await eventually(lambda: _final(stack, "p"))
    assert row.outcome_kind is OutcomeKind.COMPLETED
    assert (await stack.client.start(helper_request(owner, "q"))).status == "running"
    await eventually(lambda: core.reset_calls >= 3, timeout=30)
    unchanged = await stack.store.get(owner, "p")
    assert unchanged is not None and unchanged.outcome_kind is OutcomeKind.COMPLETED
    core.reset_fails = False
    await eventually(lambda: "fake-1" not in core.sessions, timeout=45)
    await eventually(lambda: _workflow_ended(stack, "p", "COMPLETED"), timeout=20)
    assert await parked_of(stack.store, owner) == []


@pytest.mark.parametrize("misbehaviour", ["html", "bad_json", "wrong_types", "negative", "missing", "hang"])
async def test_bad_core_answers_end_in_a_failed_outcome_never_a_stuck_workflow(
    fake_stack: tuple[Stack, FakeCore], misbehaviour: str
):
    """R10, R18: HTML error pages, broken JSON, wrong types, negative counts, missing fields and hangs
    beyond the call bound are retried a bounded number of times, then give a failed outcome with a clear
    text; the workflow itself never fails."""
    stack, core = fake_stack
    owner = stack.owner
    await stack.client.start(helper_request(owner, "bad"))
    await eventually(lambda: core.sessions.get("fake-1"))
    core.misbehave = misbehaviour
    row = await eventually(lambda: _final(stack, "bad"), timeout=30)
    assert row.outcome_kind is OutcomeKind.FAILED
    # The owner reads a plain sentence; the technical detail is in the logs and the history (R32).
    expected = "gave no answer for 2 seconds" if misbehaviour == "hang" else "could not be read"
    assert expected in (row.summary or "")
    assert "/v1/" not in (row.summary or "")
    # A failed outcome ends the workflow Failed, so the Web UI's list shows it red, once its cleanup is done: the
    # core recovers and the reset, retried with backoff, gets through.
    core.misbehave = None
    await eventually(lambda: _workflow_ended(stack, "bad", "FAILED"), timeout=60)


async def test_an_event_whose_outcomes_were_all_closed_is_withdrawn(stack: Stack):
    """R22, R26: the chat was busy, so the event for one outcome waits; the owner closes that outcome: the event
    is withdrawn (never offered), and the store says so instead of keeping its last attempt's state for ever."""
    owner = stack.owner
    async with httpx.AsyncClient() as http:
        await http.put(f"{stack.chat_url}/v1/owners/{owner}/idle", json={"idle": False})
        await stack.client.start(helper_request(owner, "lone", scripted_task("Look.", steps=1, step_ms=20)))
        await eventually(functools.partial(_final, stack, "lone"))
        events = await eventually(lambda: chat_events(stack.store, owner), timeout=30)
        assert events[0].state in ("pending", "attempting")
        await stack.client.close(owner, "lone")
        withdrawn = await eventually(lambda: _event_states(stack, owner, {"withdrawn"}), timeout=30)
        await http.put(f"{stack.chat_url}/v1/owners/{owner}/idle", json={"idle": True})
        await asyncio.sleep(3)  # longer than the first backoff: an event still queued would be offered now
    assert [event.key for event in withdrawn] == [events[0].key]
    assert await stack.chat_events() == []


async def _event_states(stack: Stack, owner: str, states: set[str]) -> list[ChatEvent]:
    events = await chat_events(stack.store, owner)
    return [event for event in events if event.state in states]
