"""Finish-now, cancel confirmation and reset: the calls the runtime uses to end a helper's session."""

from __future__ import annotations

import asyncio

import pytest

from contracts.core_api import CancelAnswer, SessionStatus, StopReason
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, in_english, in_russian, unique

RUNNING = {"end": "run", "step_ms": 20, "input_tokens": 1000, "input_growth": 100}
QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}


@pytest.mark.parametrize("language", ["en", "ru"])
async def test_finish_now_ends_partial_after_one_final_call(core: CoreUnderTest, language: str) -> None:
    """R13, R15, R32: finish-now answers 202 with the snapshot; the next call is final; partial, finish_now."""
    session_id = await core.create(scripted_task("Finish early", **RUNNING), language=language)
    await core.wait_for(session_id, lambda s: len(s.steps) >= 2)

    asked = await core.finish(session_id)
    final = await core.settled(session_id)

    assert asked.finish_requested
    assert final.status is SessionStatus.PARTIAL
    assert final.outcome is not None and final.outcome.stop_reason is StopReason.FINISH_NOW
    # The call in flight when finish came may complete; the one after it is the final one.
    assert len(asked.steps) + 1 <= len(final.steps) <= len(asked.steps) + 2
    opening = final.outcome.text.split("\n", 1)[0]
    assert (in_russian if language == "ru" else in_english)(opening), final.outcome.text
    assert final.last_message and final.last_message in final.outcome.text


async def test_finish_on_an_ended_session_changes_nothing(core: CoreUnderTest) -> None:
    """R19: an ended session's outcome never changes, whatever is asked later."""
    session_id = await core.create(scripted_task("Already done", steps=1, **QUICK))
    done = await core.settled(session_id)

    assert await core.finish(session_id) == done
    assert await core.snapshot(session_id) == done


async def test_cancel_says_stopped_only_once_the_turn_stopped(core: CoreUnderTest) -> None:
    """R7, R21: stopped true means the turn has ended: the status is terminal and no call follows."""
    session_id = await core.create(scripted_task("Cancel me", **RUNNING))
    await core.wait_for(session_id, lambda s: len(s.steps) >= 1)

    answer = await core.cancel(session_id)
    while not answer.stopped:  # a core may need a moment; the runtime asks again
        await asyncio.sleep(0.02)
        answer = await core.cancel(session_id)
    stopped = await core.snapshot(session_id)

    assert answer.status.is_terminal and stopped.status is answer.status
    assert stopped.cancel_requested
    await asyncio.sleep(0.1)  # five step lengths
    assert await core.snapshot(session_id) == stopped


async def test_a_slow_cancel_is_not_confirmed_before_the_turn_stops(core: CoreUnderTest) -> None:
    """R7: while the turn still runs, cancel answers stopped false (repeatably); then cancelled and confirmed."""
    session_id = await core.create(scripted_task("Slow to stop", cancel_delay_ms=300, **RUNNING))
    await core.wait_for(session_id, lambda s: len(s.steps) >= 1)

    first = await core.cancel(session_id)
    second = await core.cancel(session_id)
    meanwhile = await core.snapshot(session_id)
    stopped = await core.settled(session_id, within=5)
    later = await core.cancel(session_id)

    assert first == second == CancelAnswer(stopped=False, status=SessionStatus.RUNNING)
    assert meanwhile.status is SessionStatus.RUNNING and meanwhile.cancel_requested
    assert stopped.status is SessionStatus.CANCELLED
    assert later == CancelAnswer(stopped=True, status=SessionStatus.CANCELLED)


async def test_a_paused_session_is_cancelled_at_once(core: CoreUnderTest) -> None:
    """R16, R17: nothing runs in a paused session, so cancel stops it at once, even on a slow-to-stop turn."""
    session_id = await core.create(scripted_task("Pause", steps=1, end="question", cancel_delay_ms=5000, **QUICK))
    paused = await core.settled(session_id)

    answer = await core.cancel(session_id)
    cancelled = await core.snapshot(session_id)

    assert answer == CancelAnswer(stopped=True, status=SessionStatus.CANCELLED)
    assert cancelled.status is SessionStatus.CANCELLED
    assert cancelled.question == paused.question  # what the pause was about stays readable


async def test_cancel_of_an_ended_session_confirms_and_changes_nothing(core: CoreUnderTest) -> None:
    """R7, R19: an ended turn has stopped: cancel says so with its status, and the outcome stays."""
    session_id = await core.create(scripted_task("Done first", steps=1, **QUICK))
    done = await core.settled(session_id)

    assert await core.cancel(session_id) == CancelAnswer(stopped=True, status=SessionStatus.COMPLETED)
    assert await core.snapshot(session_id) == done


@pytest.mark.parametrize("state", ["running", "ended"])
async def test_reset_deletes_the_session_and_it_is_404_afterwards(core: CoreUnderTest, state: str) -> None:
    """R20, R9: reset answers {reset: true}; every call on the session is then a 404; its key starts nothing."""
    body = core.body(scripted_task("Reset me", **(RUNNING if state == "running" else {"steps": 1, **QUICK})))
    session_id = (await core.http.post("/v1/sessions", json=body)).json()["session_id"]
    if state == "running":
        await core.wait_for(session_id, lambda s: len(s.steps) >= 1)
    else:
        await core.settled(session_id)

    reset = await core.http.post(f"/v1/sessions/{session_id}/reset")
    core.forget(session_id)

    assert reset.status_code == 200 and reset.json() == {"reset": True}
    for method, path in [
        ("GET", f"/v1/sessions/{session_id}"),
        ("POST", f"/v1/sessions/{session_id}/finish"),
        ("POST", f"/v1/sessions/{session_id}/cancel"),
        ("POST", f"/v1/sessions/{session_id}/reset"),
    ]:
        gone = await core.http.request(method, path)
        assert gone.status_code == 404, (method, path, gone.text)
        assert check_problem(gone).code == "session_not_found"
    again = await core.http.post("/v1/sessions", json=body)
    assert again.status_code == 200 and again.json() == {"session_id": session_id, "created": False}


async def test_an_unknown_session_is_a_404_problem(core: CoreUnderTest) -> None:
    """R24: a session the core does not know is 404 session_not_found, and the message names it."""
    unknown = unique("s-unknown")
    for method, suffix in [("GET", ""), ("POST", "/finish"), ("POST", "/cancel"), ("POST", "/reset")]:
        response = await core.http.request(method, f"/v1/sessions/{unknown}{suffix}")
        assert response.status_code == 404
        problem = check_problem(response)
        assert problem.code == "session_not_found" and unknown in problem.message
