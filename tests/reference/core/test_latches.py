"""Latches: a scripted turn held until `POST /v1/demo/latches/{name}/release`, through real HTTP.

Every wait is bounded: a held turn is observed through the latch's `waiting` count, never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from contracts.core_api import SessionStatus, StopReason
from reference.core.script import scripted_task
from tests.reference.core.support import FAST, create, session_body, settled, snapshot


def _latch() -> str:
    return f"latch-{uuid.uuid4().hex[:12]}"


async def _state(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await client.get(f"/v1/demo/latches/{name}")
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _held(client: httpx.AsyncClient, name: str, count: int = 1, within: float = 5.0) -> None:
    """Until `count` turns wait on the latch (fails after `within` seconds)."""
    deadline = asyncio.get_running_loop().time() + within
    while (await _state(client, name))["waiting"] < count:
        assert asyncio.get_running_loop().time() < deadline, f"no turn held on {name} within {within} s"
        await asyncio.sleep(0.01)


async def test_a_held_turn_makes_no_call_until_the_latch_is_released(client: httpx.AsyncClient) -> None:
    name = _latch()
    first = await create(client, scripted_task("Hold me", steps=2, hold_until=name, **FAST), helper_id="a")
    second = await create(client, scripted_task("Hold me too", steps=2, hold_until=name, **FAST), helper_id="b")
    await _held(client, name, count=2)

    for session_id in (first, second):
        held = await snapshot(client, session_id)
        assert held.status is SessionStatus.RUNNING and held.steps == []

    released = await client.post(f"/v1/demo/latches/{name}/release")
    assert released.status_code == 200
    assert released.json() == {"name": name, "released": True, "waiting": 2}
    for session_id in (first, second):
        done = await settled(client, session_id)
        assert done.status is SessionStatus.COMPLETED and len(done.steps) == 2


async def test_a_turn_can_be_held_at_a_later_step(client: httpx.AsyncClient) -> None:
    name = _latch()
    session_id = await create(client, scripted_task("Later", steps=3, hold_until=name, hold_at_step=2, **FAST))
    await _held(client, name)
    assert len((await snapshot(client, session_id)).steps) == 1  # call 1 ran, call 2 waits

    await client.post(f"/v1/demo/latches/{name}/release")
    assert (await settled(client, session_id)).status is SessionStatus.COMPLETED


async def test_a_released_latch_stays_open_for_later_turns(client: httpx.AsyncClient) -> None:
    name = _latch()
    assert (await client.post(f"/v1/demo/latches/{name}/release")).json()["waiting"] == 0
    session_id = await create(client, scripted_task("Late", steps=1, hold_until=name, **FAST))
    assert (await settled(client, session_id)).status is SessionStatus.COMPLETED
    assert await _state(client, name) == {"name": name, "released": True, "waiting": 0}


async def test_cancel_stops_a_held_turn_at_once(client: httpx.AsyncClient) -> None:
    name = _latch()
    session_id = await create(client, scripted_task("Cancel me", steps=2, hold_until=name, **FAST))
    await _held(client, name)

    answer = (await client.post(f"/v1/sessions/{session_id}/cancel")).json()

    assert answer == {"stopped": True, "status": "cancelled"}
    assert (await _state(client, name))["waiting"] == 0


async def test_finish_now_is_not_held_up_by_a_latch(client: httpx.AsyncClient) -> None:
    name = _latch()
    session_id = await create(client, scripted_task("Finish me", end="run", steps=50, hold_until=name, **FAST))
    await _held(client, name)

    assert (await client.post(f"/v1/sessions/{session_id}/finish")).status_code == 202
    done = await settled(client, session_id)

    assert done.status is SessionStatus.PARTIAL and done.outcome is not None
    assert done.outcome.stop_reason is StopReason.FINISH_NOW and len(done.steps) == 1


async def test_a_forgotten_latch_opens_itself_after_the_timeout(client: httpx.AsyncClient) -> None:
    name = _latch()
    session_id = await create(client, scripted_task("Forgotten", steps=1, hold_until=name, hold_timeout_ms=200, **FAST))
    done = await settled(client, session_id, within=5)
    assert done.status is SessionStatus.COMPLETED
    assert (await _state(client, name))["released"] is False  # nobody released it: the wait timed out


async def test_a_cancel_is_confirmed_only_once_its_latch_is_released(client: httpx.AsyncClient) -> None:
    """The slow core of the demo's "close while running": the stop waits for the scenario, not a clock."""
    name = _latch()
    session_id = await create(client, scripted_task("Slow stop", end="run", steps=50, cancel_hold_until=name, **FAST))
    first = (await client.post(f"/v1/sessions/{session_id}/cancel")).json()
    assert first == {"stopped": False, "status": "running"}
    await _held(client, name)
    assert (await client.post(f"/v1/sessions/{session_id}/cancel")).json()["stopped"] is False

    await client.post(f"/v1/demo/latches/{name}/release")
    done = await settled(client, session_id)

    assert done.status is SessionStatus.CANCELLED
    assert (await client.post(f"/v1/sessions/{session_id}/cancel")).json() == {"stopped": True, "status": "cancelled"}


async def test_bad_latch_names_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/demo/latches/" + "x" * 65 + "/release")
    assert response.status_code == 400 and response.json()["code"] == "invalid_latch"

    bad_script = 't\n\n```helper-script\n{"hold_until": "a b"}\n```\n'  # written by hand: the builder refuses it
    created = await client.post("/v1/sessions", json=session_body(bad_script))
    assert created.status_code == 400 and created.json()["code"] == "invalid_script"
    assert "script.hold_until" in created.json()["message"]


async def test_latches_are_not_part_of_the_contract(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    assert not any("latches" in path for path in document["paths"])
