"""Telling the chat (R26), delivery by turns (R28) and one owner never touching another's helpers (R34)."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType

from protocol.errors import HelperRefused
from protocol.names import CHAT_IDLE, coordinator_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.client import HelperClient
from starter.inputs import delivered_request, read_request
from tests.e2e.conftest import Stack, _stack
from tests.helpers import chat_events, eventually, helper_request

pytestmark = pytest.mark.e2e


async def _final(stack: Stack, helper_id: str, owner: str | None = None) -> Any:
    row = await stack.store.get(owner or stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def _event_state(stack: Stack, state: str) -> Any:
    events = await chat_events(stack.store, stack.owner)
    return events if events and events[-1].state == state else None


async def _chat(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    async with httpx.AsyncClient() as http:
        response = await http.request(method, f"{stack.chat_url}{path}", json=body)
        response.raise_for_status()
        return response.json()


@pytest.mark.parametrize(("mode", "state_while_failing"), [("down", "uncertain"), ("lose_receipt", "uncertain")])
async def test_a_failing_chat_gets_the_event_once_it_is_back(stack: Stack, mode: str, state_while_failing: str):
    """R26: while the chat fails, the event is not delivered (no receipt: uncertain, since a 503 may hide a
    taken event); it is offered again with the same key, and once the chat answers, exactly one event
    exists there and the store records it delivered with the chat's receipt."""
    await _chat(stack, "PUT", "/v1/control/failing", {"failing": True, "mode": mode})
    await stack.client.start(helper_request(stack.owner, "note", scripted_task("Note.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "note"))
    failing = await eventually(functools.partial(_event_state, stack, state_while_failing), timeout=30)
    assert failing[-1].receipt_id is None
    await _chat(stack, "PUT", "/v1/control/failing", {"failing": False, "mode": mode})
    delivered = await eventually(functools.partial(_event_state, stack, "delivered"), timeout=30)
    assert delivered[-1].attempts >= 2 and delivered[-1].receipt_id
    received = await stack.chat_events()
    assert [event["helper_ids"] for event in received] == [["note"]]
    assert received[0]["key"] == delivered[-1].key


async def _offered_at_least(stack: Stack, attempts: int) -> Any:
    events = await chat_events(stack.store, stack.owner)
    return events if events and events[-1].attempts >= attempts else None


async def test_an_event_whose_outcome_was_read_and_delivered_is_withdrawn_and_holds_back_no_fresh_one(stack: Stack):
    """R26, R28: the chat is down, so the event for one outcome is offered again and again, each time after a
    longer backoff; meanwhile a turn reads and delivers that outcome (the chat has it): the event is withdrawn,
    never offered again. Once the chat is back, a fresh outcome's event is offered at once, not after the
    withdrawn event's backoff."""
    owner = stack.owner
    await _chat(stack, "PUT", "/v1/control/failing", {"failing": True, "mode": "down"})
    await stack.client.start(helper_request(owner, "first", scripted_task("First.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "first"))
    # Four failed offers: the next one would wait a backoff of 16 s.
    offered = await eventually(functools.partial(_offered_at_least, stack, 4), timeout=60)
    await stack.client.read(read_request(owner, "turn-1", ["first"]))
    assert (await stack.client.delivered(delivered_request(owner, "turn-1", answer_chars=40))).delivered == ["first"]
    withdrawn = await eventually(functools.partial(_event_state, stack, "withdrawn"), timeout=30)
    assert withdrawn[-1].key == offered[-1].key
    await _chat(stack, "PUT", "/v1/control/failing", {"failing": False, "mode": "down"})
    await stack.client.start(helper_request(owner, "second", scripted_task("Second.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "second"))
    received = await eventually(stack.chat_events, timeout=10)  # well inside the withdrawn event's backoff
    assert [event["helper_ids"] for event in received] == [["second"]]
    await asyncio.sleep(3)
    assert [event["helper_ids"] for event in await stack.chat_events()] == [["second"]], "offered again"


async def _offer_activities(stack: Stack) -> list[str]:
    """The coordinator's scheduled activities that offered a chat event."""
    handle = stack.env.client.get_workflow_handle(coordinator_id(stack.owner))
    return [
        name
        for event in (await handle.fetch_history()).events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and (name := event.activity_task_scheduled_event_attributes.activity_type.name) == "offer_chat_event"
    ]


async def _signals_named(stack: Stack, name: str) -> int:
    handle = stack.env.client.get_workflow_handle(coordinator_id(stack.owner))
    return sum(
        1
        for event in (await handle.fetch_history()).events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == name
    )


async def _after_the_signal(stack: Stack, name: str) -> str:
    """What the coordinator did first after the signal: offered the event again, or let its backoff's timer fire."""
    handle = stack.env.client.get_workflow_handle(coordinator_id(stack.owner))
    signaled = False
    for event in (await handle.fetch_history()).events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = signaled or event.workflow_execution_signaled_event_attributes.signal_name == name
        elif signaled and event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            return "timer"
        elif (
            signaled
            and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == "offer_chat_event"
        ):
            return "offer"
    return "nothing"


async def test_a_chat_that_says_it_turned_idle_is_offered_the_waiting_event_at_once(stack: Stack):
    """R26: the chat is busy, so the event is offered again and again, each time after a longer backoff; the chat
    turns idle and says so: the event arrives within seconds, not after the backoff (16 s by then). Saying so
    while no event waits costs Temporal nothing: no signal reaches the coordinator."""
    owner = stack.owner
    await _chat(stack, "PUT", f"/v1/owners/{owner}/idle", {"idle": False})
    await stack.client.start(helper_request(owner, "busy-spell", scripted_task("Done.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "busy-spell"))
    busy = await eventually(functools.partial(_offered_at_least, stack, 4), timeout=60)
    busy = await eventually(functools.partial(_event_state, stack, "pending"), timeout=10)
    await _chat(stack, "PUT", f"/v1/owners/{owner}/idle", {"idle": True})
    assert (await stack.client.chat_idle(owner)).told
    received = await eventually(stack.chat_events, timeout=20)
    assert [event["helper_ids"] for event in received] == [["busy-spell"]]
    delivered = await eventually(functools.partial(_event_state, stack, "delivered"), timeout=10)
    # The offer right after the busy one's, and the backoff's timer (16 s) had not fired when it was made.
    assert delivered[-1].attempts == busy[-1].attempts + 1
    assert await _after_the_signal(stack, CHAT_IDLE) == "offer", "the event waited for the backoff"
    assert not (await stack.client.chat_idle(owner)).told
    assert await _signals_named(stack, CHAT_IDLE) == 1


async def test_an_idle_chat_is_offered_the_event_once(stack: Stack):
    """R26: an idle chat answers the offer, an activity of the coordinator: the event is delivered, with the
    chat's receipt, by one offer."""
    await stack.client.start(helper_request(stack.owner, "quick", scripted_task("Quick.", steps=1, step_ms=20)))
    delivered = await eventually(functools.partial(_event_state, stack, "delivered"), timeout=30)
    assert delivered[-1].receipt_id and delivered[-1].helper_ids == ["quick"]
    assert await _offer_activities(stack) == ["offer_chat_event"]


async def test_a_turn_that_never_answered_lets_the_outcome_be_told_again(stack: Stack):
    """R28: a turn reads an outcome and is lost before answering (a restart); the outcome stays unreported,
    the next turn reads it again, answers, and only then is it delivered."""
    await stack.client.start(helper_request(stack.owner, "told", scripted_task("Tell.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "told"))
    await stack.client.read(read_request(stack.owner, "turn-lost", ["told"]))
    # turn-lost never calls delivered: it died between reading and answering.
    assert [v.helper_id for v in await stack.client.unreported(stack.owner)] == ["told"]
    await stack.client.read(read_request(stack.owner, "turn-next", ["told"]))
    answer = await stack.client.delivered(delivered_request(stack.owner, "turn-next", answer_chars=120))
    assert answer.delivered == ["told"]
    assert await stack.client.unreported(stack.owner) == []
    late = await stack.client.delivered(delivered_request(stack.owner, "turn-lost", answer_chars=10))
    assert late.delivered == []  # nothing left to deliver for the lost turn


async def test_one_owner_cannot_see_close_or_mark_another_owners_helper(stack: Stack):
    """R34: every operation is scoped to its owner: another owner's list, show, close and read neither see
    nor touch the helper, and its row is unchanged."""
    owner, other = stack.owner, f"{stack.owner}-other"
    await stack.client.start(helper_request(owner, "private", scripted_task("Mine.", steps=1, step_ms=20)))
    await eventually(functools.partial(_final, stack, "private"))
    assert await stack.client.list_helpers(other) == []
    assert await stack.client.unreported(other) == []
    with pytest.raises(HelperRefused):
        await stack.client.show(other, "private")
    with pytest.raises(HelperRefused) as closing:
        await stack.client.close(other, "private")
    assert closing.value.code == "unknown_helper"
    with pytest.raises(HelperRefused):
        await stack.client.read(read_request(other, "t1", ["private"]))
    assert (await stack.client.delivered(delivered_request(other, "t1", answer_chars=5))).delivered == []
    row = await stack.store.get(owner, "private")
    assert row is not None and row.state.value == "unreported"
    assert [v.helper_id for v in await stack.client.unreported(owner)] == ["private"]


async def test_unreported_outcomes_are_listed_while_no_worker_runs(dev_env, tmp_path):
    """R27: `unreported` reads the store only: with every worker stopped (and the starter not even
    connecting to Temporal) the outcomes and their summaries are listed, through the client and the CLI."""
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url) as stack,
    ):
        await stack.client.start(helper_request(stack.owner, "done", scripted_task("Done.", steps=1, step_ms=20)))
        await eventually(functools.partial(_final, stack, "done"))
        settings, owner = stack.settings, stack.owner
    # The worker is gone now; Temporal is not even asked.
    reader = await HelperClient.connect(settings.model_copy(update={"temporal_address": "127.0.0.1:9"}), temporal=False)
    try:
        listed = await reader.unreported(owner)
    finally:
        await reader.aclose()
    assert [(view.helper_id, bool(view.summary)) for view in listed] == [("done", True)]
    environment = {
        "PATH": "",
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
        "HELPER_STORE_URL": settings.store.text,
        "HELPER_RESULTS_DIR": str(settings.results_dir),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "unreported", "--owner", owner, stdout=subprocess.PIPE, env=environment
    )
    output, _ = await process.communicate()
    assert process.returncode == 0
    assert [row["helper_id"] for row in json.loads(output)] == ["done"]
