"""Finish-now, cancel (immediate, delayed, paused, terminal) and reset."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from contracts.core_api import CancelAnswer, SessionStatus, Snapshot, StopReason
from reference.core.script import scripted_task
from tests.reference.core.support import FAST, create, session_body, settled, snapshot, wait_for

RUNNING_FOR_A_WHILE = {"end": "run", "step_ms": 20, "input_tokens": 1000, "input_growth": 100}


async def test_finish_now_makes_the_next_call_final_and_partial(client: httpx.AsyncClient) -> None:
    """R13, R15: finish-now ends the turn with a partial outcome from one more call, without tools."""
    session_id = await create(client, scripted_task("Finish early", **RUNNING_FOR_A_WHILE))
    await wait_for(client, session_id, lambda s: len(s.steps) >= 2)

    answer = await client.post(f"/v1/sessions/{session_id}/finish")
    asked = Snapshot.model_validate(answer.json())
    final = await settled(client, session_id)

    assert answer.status_code == 202
    assert asked.finish_requested
    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.FINISH_NOW
    # The call in flight when finish came completes; the one after it is the final summary.
    assert len(asked.steps) + 1 <= len(final.steps) <= len(asked.steps) + 2
    assert final.outcome.text == (f"I was asked to finish now, so this is a partial outcome.\n\n{final.last_message}")
    assert final.last_message.startswith("Summary of 'Finish early'")


async def test_finish_on_an_ended_session_changes_nothing(client: httpx.AsyncClient) -> None:
    """R19 (core side): an ended session's outcome never changes."""
    session_id = await create(client, scripted_task("Already done", steps=1, **FAST))
    done = await settled(client, session_id)

    answer = await client.post(f"/v1/sessions/{session_id}/finish")

    assert answer.status_code == 202
    assert Snapshot.model_validate(answer.json()) == done == await snapshot(client, session_id)


async def test_cancel_stops_the_turn_at_once(client: httpx.AsyncClient) -> None:
    """R7, R21: with an immediate cancel the answer says stopped only because the turn has stopped."""
    session_id = await create(client, scripted_task("Cancel me", **RUNNING_FOR_A_WHILE))
    await wait_for(client, session_id, lambda s: len(s.steps) >= 1)

    answer = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())
    stopped = await snapshot(client, session_id)

    assert answer == CancelAnswer(stopped=True, status=SessionStatus.CANCELLED)
    assert stopped.status is SessionStatus.CANCELLED and stopped.cancel_requested
    assert stopped.outcome is not None and stopped.outcome.text.startswith("The turn was cancelled.")
    assert stopped.last_message in stopped.outcome.text
    await asyncio.sleep(0.06)  # three step lengths: a stopped turn makes no further calls
    assert await snapshot(client, session_id) == stopped


async def test_a_delayed_cancel_confirms_only_after_the_turn_stopped(client: httpx.AsyncClient) -> None:
    """R7: stopped is false while the turn still runs; after the delay it is cancelled and confirmed."""
    session_id = await create(client, scripted_task("Slow to stop", cancel_delay_ms=300, **RUNNING_FOR_A_WHILE))
    await wait_for(client, session_id, lambda s: len(s.steps) >= 1)

    first = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())
    second = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())
    meanwhile = await snapshot(client, session_id)
    stopped = await wait_for(client, session_id, lambda s: s.status is not SessionStatus.RUNNING, within=2)
    later = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())

    assert first == second == CancelAnswer(stopped=False, status=SessionStatus.RUNNING)
    assert meanwhile.status is SessionStatus.RUNNING and meanwhile.cancel_requested
    assert stopped.status is SessionStatus.CANCELLED
    assert later == CancelAnswer(stopped=True, status=SessionStatus.CANCELLED)


@pytest.mark.parametrize("end", ["question", "authorization"])
async def test_cancel_of_a_paused_session_stops_it_at_once(client: httpx.AsyncClient, end: str) -> None:
    """R16, R17: a paused session (question, authorization wait) is cancelled at once, even on a slow core."""
    session_id = await create(client, scripted_task("Pause", steps=1, end=end, cancel_delay_ms=5000, **FAST))
    paused = await settled(client, session_id)
    assert paused.status is SessionStatus(end)

    answer = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())
    cancelled = await snapshot(client, session_id)

    assert answer == CancelAnswer(stopped=True, status=SessionStatus.CANCELLED)
    assert cancelled.status is SessionStatus.CANCELLED
    # What the pause was about stays readable for the helper's outcome (R17).
    assert (cancelled.question, cancelled.authorization) == (paused.question, paused.authorization)


async def test_cancel_of_an_ended_session_changes_nothing(client: httpx.AsyncClient) -> None:
    """R7: an ended turn has stopped; cancel confirms that and keeps the status and outcome."""
    session_id = await create(client, scripted_task("Done first", steps=1, **FAST))
    done = await settled(client, session_id)

    answer = CancelAnswer.model_validate((await client.post(f"/v1/sessions/{session_id}/cancel")).json())

    assert answer == CancelAnswer(stopped=True, status=SessionStatus.COMPLETED)
    assert await snapshot(client, session_id) == done


async def test_reset_stops_and_deletes_the_session_and_keeps_the_key(client: httpx.AsyncClient) -> None:
    """R20, R9: reset is cleanup: the turn stops, the session is gone, and its key never starts another."""
    body = session_body(scripted_task("Reset me", **RUNNING_FOR_A_WHILE), key="key-reset")
    session_id = (await client.post("/v1/sessions", json=body)).json()["session_id"]
    await wait_for(client, session_id, lambda s: len(s.steps) >= 1)

    reset = await client.post(f"/v1/sessions/{session_id}/reset")
    again = await client.post(f"/v1/sessions/{session_id}/reset")
    recreate = await client.post("/v1/sessions", json=body)

    assert reset.status_code == 200 and reset.json() == {"reset": True}
    assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404
    assert again.status_code == 404
    assert recreate.status_code == 200
    assert recreate.json() == {"session_id": session_id, "created": False}


async def test_reset_of_an_ended_session(client: httpx.AsyncClient) -> None:
    """R20: reset after finalizing deletes the ended session."""
    session_id = await create(client, scripted_task("Ended", steps=1, **FAST))
    await settled(client, session_id)

    assert (await client.post(f"/v1/sessions/{session_id}/reset")).json() == {"reset": True}
    assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404
