"""The reference chat: idle flag, inbound events with dedup by key, the failing control, restart."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.chat_api import EventReceipt, ReceivedEvent
from contracts.core_api import Problem
from reference.chat.server import running_chat


def event(key: str | None = None, helper_ids: tuple[str, ...] = ("h1",)) -> dict[str, Any]:
    return {
        "key": key or f"event-{uuid.uuid4().hex}",
        "helper_ids": list(helper_ids),
        "text": "Helper outcomes are ready to report.",
    }


async def received(chat: httpx.AsyncClient, owner: str) -> list[ReceivedEvent]:
    response = await chat.get(f"/v1/owners/{owner}/events")
    assert response.status_code == 200
    return [ReceivedEvent.model_validate(item) for item in response.json()]


async def test_a_chat_is_idle_until_told_otherwise_per_owner(chat: httpx.AsyncClient) -> None:
    """R26: the idle flag the runtime checks before offering an event; it defaults to idle."""
    assert (await chat.get("/v1/owners/idle-ada/idle")).json() == {"idle": True}

    put = await chat.put("/v1/owners/idle-ada/idle", json={"idle": False})

    assert put.json() == {"idle": False}
    assert (await chat.get("/v1/owners/idle-ada/idle")).json() == {"idle": False}
    assert (await chat.get("/v1/owners/idle-bob/idle")).json() == {"idle": True}


async def test_a_repeated_key_returns_the_first_receipt_and_stores_nothing_new(chat: httpx.AsyncClient) -> None:
    """R26: the event's key makes a repeat harmless (inbound dedup)."""
    first = await chat.post("/v1/owners/dedup-ada/events", json=event("ready-h1-h2", ("h1", "h2")))
    repeat = await chat.post("/v1/owners/dedup-ada/events", json=event("ready-h1-h2", ("h1", "h2")))
    other = await chat.post("/v1/owners/dedup-ada/events", json=event("ready-h3", ("h3",)))

    assert first.status_code == repeat.status_code == other.status_code == 202
    first_receipt = EventReceipt.model_validate(first.json())
    repeat_receipt = EventReceipt.model_validate(repeat.json())
    assert not first_receipt.duplicate and repeat_receipt.duplicate
    assert (repeat_receipt.event_id, repeat_receipt.accepted_at) == (first_receipt.event_id, first_receipt.accepted_at)
    events = await received(chat, "dedup-ada")
    assert [(e.key, e.helper_ids) for e in events] == [("ready-h1-h2", ["h1", "h2"]), ("ready-h3", ["h3"])]
    assert events[0].event_id == first_receipt.event_id
    # Keys are per owner: another owner's event with the same key is its own.
    elsewhere = await chat.post("/v1/owners/dedup-bob/events", json=event("ready-h1-h2"))
    assert not EventReceipt.model_validate(elsewhere.json()).duplicate


async def test_a_busy_chat_still_queues_events(chat: httpx.AsyncClient) -> None:
    """R26: the chat can become busy after the idle check; its inbound queue still takes the event."""
    await chat.put("/v1/owners/busy-ada/idle", json={"idle": False})

    taken = await chat.post("/v1/owners/busy-ada/events", json=event("while-busy"))

    assert taken.status_code == 202
    assert [e.key for e in await received(chat, "busy-ada")] == ["while-busy"]


async def test_a_failing_chat_answers_503_and_stores_nothing(healthy: httpx.AsyncClient) -> None:
    """R26: a chat that is down gives no receipt, so the event is not delivered; it works again after."""
    control = await healthy.put("/v1/control/failing", json={"failing": True})
    down = await healthy.post("/v1/owners/down-ada/events", json=event("during-outage"))
    assert (await received(healthy, "down-ada")) == []

    await healthy.put("/v1/control/failing", json={"failing": False})
    back = await healthy.post("/v1/owners/down-ada/events", json=event("during-outage"))

    assert control.json()["mode"] == "down"
    assert down.status_code == 503
    assert Problem.model_validate(down.json()).code == "chat_unavailable"
    assert back.status_code == 202 and back.json()["duplicate"] is False
    assert [e.key for e in await received(healthy, "down-ada")] == ["during-outage"]


async def test_a_lost_receipt_is_harmless_to_repeat(healthy: httpx.AsyncClient) -> None:
    """R26: the chat took the event but its answer was lost; the repeat finds the first receipt."""
    await healthy.put("/v1/control/failing", json={"failing": True, "mode": "lose_receipt"})
    lost = await healthy.post("/v1/owners/lost-ada/events", json=event("answer-lost"))
    await healthy.put("/v1/control/failing", json={"failing": False})

    repeat = await healthy.post("/v1/owners/lost-ada/events", json=event("answer-lost"))

    assert lost.status_code == 503
    assert repeat.status_code == 202 and repeat.json()["duplicate"] is True
    assert [e.key for e in await received(healthy, "lost-ada")] == ["answer-lost"]


async def test_a_slow_receipt_times_out_the_caller_but_the_event_is_taken(healthy: httpx.AsyncClient) -> None:
    """R26: a caller whose wait ends first cannot know; the chat has the event, and a repeat says so."""
    await healthy.put("/v1/control/failing", json={"failing": True, "mode": "slow_receipt", "delay_ms": 500})
    with pytest.raises(httpx.ReadTimeout):
        await healthy.post("/v1/owners/slow-ada/events", json=event("slow"), timeout=0.1)
    await healthy.put("/v1/control/failing", json={"failing": False})

    repeat = await healthy.post("/v1/owners/slow-ada/events", json=event("slow"))

    assert repeat.json()["duplicate"] is True
    assert [e.key for e in await received(healthy, "slow-ada")] == ["slow"]


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/v1/owners/ada/events", {"key": "k", "helper_ids": [], "text": "t"}, "helper_ids"),
        ("/v1/owners/ada/events", {"key": "", "helper_ids": ["h1"], "text": "t"}, "key"),
        ("/v1/owners/ada/events", {"key": "k", "helper_ids": ["h1"]}, "text is missing"),
        ("/v1/owners/ada/events", {"key": "k", "helper_ids": ["h1"], "text": "x" * 2001}, "text"),
        ("/v1/owners/-bad owner/events", event(), "owner"),
        ("/v1/owners/ada/idle", {"idle": "maybe"}, "idle"),
    ],
)
async def test_a_bad_request_is_a_problem_naming_the_field(
    chat: httpx.AsyncClient, path: str, body: dict[str, Any], named: str
) -> None:
    method = "PUT" if path.endswith("/idle") else "POST"
    refused = await chat.request(method, path, json=body)

    assert refused.status_code == 422
    assert named in Problem.model_validate(refused.json()).message
    assert await received(chat, "ada") == []


async def test_a_restart_with_a_state_file_keeps_dedup_and_idle(tmp_path: Path) -> None:
    """R26: a restarted chat still knows the keys it took, so a repeat after its restart stays harmless."""
    state_file = tmp_path / "chat.jsonl"
    async with running_chat(state_file=state_file) as base_url, httpx.AsyncClient(base_url=base_url) as chat:
        first = EventReceipt.model_validate((await chat.post("/v1/owners/ada/events", json=event("k1"))).json())
        await chat.put("/v1/owners/ada/idle", json={"idle": False})

    async with running_chat(state_file=state_file) as base_url, httpx.AsyncClient(base_url=base_url) as chat:
        repeat = EventReceipt.model_validate((await chat.post("/v1/owners/ada/events", json=event("k1"))).json())
        idle = (await chat.get("/v1/owners/ada/idle")).json()
        events = await received(chat, "ada")

    assert repeat.duplicate and repeat.event_id == first.event_id
    assert idle == {"idle": False}
    assert [e.event_id for e in events] == [first.event_id]


async def test_without_a_state_file_a_restart_forgets() -> None:
    """The default chat keeps state in memory only."""
    async with running_chat() as base_url, httpx.AsyncClient(base_url=base_url) as chat:
        await chat.post("/v1/owners/ada/events", json=event("k1"))
    async with running_chat() as base_url, httpx.AsyncClient(base_url=base_url) as chat:
        assert await received(chat, "ada") == []
        assert (await chat.get("/healthz")).json() == {"ok": True}
