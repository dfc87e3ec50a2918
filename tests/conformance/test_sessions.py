"""Create, snapshot and health: idempotent create, the snapshot's shape and counters that only grow."""

from __future__ import annotations

import asyncio

from contracts.core_api import SessionCreated, SessionStatus
from reference.core.script import scripted_task
from tests.conformance.contract import CoreUnderTest, check_problem, unique

QUICK = {"step_ms": 5, "input_tokens": 1000, "input_growth": 500}


async def test_health(core: CoreUnderTest) -> None:
    """The core says it is up (the runtime and the demo wait for it)."""
    response = await core.http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"ok": True}


async def test_the_same_key_names_the_same_session(core: CoreUnderTest) -> None:
    """R9: the same idempotency key again answers 200 with the same id and created false; a new key, a new session."""
    body = core.body(scripted_task("Idempotent create", steps=2, **QUICK))
    first = await core.http.post("/v1/sessions", json=body)
    retries = await asyncio.gather(*(core.http.post("/v1/sessions", json=body) for _ in range(3)))
    other = await core.http.post("/v1/sessions", json={**body, "idempotency_key": unique("other-key")})

    assert first.status_code == 201, first.text
    created = SessionCreated.model_validate(first.json())
    assert created.created is True
    for again in retries:
        assert again.status_code == 200, again.text
        assert SessionCreated.model_validate(again.json()) == SessionCreated(
            session_id=created.session_id, created=False
        )
    assert other.status_code == 201
    assert other.json()["session_id"] != created.session_id
    # The retries started nothing: the first session runs its two steps once.
    done = await core.settled(created.session_id)
    assert done.status is SessionStatus.COMPLETED and len(done.steps) == 2


async def test_the_same_key_after_the_session_ended_still_names_it(core: CoreUnderTest) -> None:
    """R9: a late retry of a create, after the turn ended, never starts a second session."""
    body = core.body(scripted_task("Ended, then retried", steps=1, **QUICK))
    session_id = (await core.http.post("/v1/sessions", json=body)).json()["session_id"]
    await core.settled(session_id)

    again = await core.http.post("/v1/sessions", json=body)

    assert again.status_code == 200
    assert again.json() == {"session_id": session_id, "created": False}


async def test_a_key_of_another_owner_is_refused(core: CoreUnderTest) -> None:
    """R9, R34: a key never hands one owner's session to another owner or helper."""
    body = core.body(scripted_task("Owner's key", steps=1, **QUICK), owner="ada")
    session_id = (await core.http.post("/v1/sessions", json=body)).json()["session_id"]

    for stolen in ({**body, "owner": "bob"}, {**body, "helper_id": unique("other-helper")}):
        refused = await core.http.post("/v1/sessions", json=stolen)
        problem = check_problem(refused)
        assert session_id not in refused.text
        assert "idempotency_key" in problem.message


async def test_the_snapshot_has_the_contract_shape_and_counters_only_grow(core: CoreUnderTest) -> None:
    """R11, R14: every poll validates as Snapshot, with per-step usage; steps and input never decrease."""
    task = scripted_task("Count the steps", steps=6, step_ms=30, input_tokens=1000, input_growth=500)
    session_id = await core.create(task)
    seen = [await core.snapshot(session_id)]
    while seen[-1].status is SessionStatus.RUNNING:
        await asyncio.sleep(0.005)
        seen.append(await core.snapshot(session_id))  # checked against the previous read

    assert any(0 < len(snapshot.steps) < 6 for snapshot in seen), "the turn was never seen in progress"
    in_progress = next(snapshot for snapshot in seen if snapshot.steps and snapshot.status is SessionStatus.RUNNING)
    assert in_progress.last_message, "a running turn shows its last completed message"
    final = seen[-1]
    assert final.status is SessionStatus.COMPLETED
    assert [step.input_tokens for step in final.steps] == [1000, 1500, 2000, 2500, 3000, 3500]
    assert [step.cached_input_tokens for step in final.steps] == [500, 750, 1000, 1250, 1500, 1750]
    assert final.input_tokens_total == 13_500
    assert final.outcome is not None and final.outcome.text
    await asyncio.sleep(0.1)
    assert await core.snapshot(session_id) == final  # R19: an ended session never changes


async def test_a_question_and_an_authorization_wait_pause_the_session(core: CoreUnderTest) -> None:
    """R16, R17: the snapshot carries the question or the action that waits, and no further calls are made."""
    question = await core.create(scripted_task("Pick a venue", steps=2, end="question", question="Lisbon?", **QUICK))
    waiting = await core.create(
        scripted_task("Book it", steps=1, end="authorization", authorization="pay the deposit", **QUICK)
    )

    asked = await core.settled(question)
    paused = await core.settled(waiting)
    await asyncio.sleep(0.05)

    assert asked.status is SessionStatus.QUESTION and asked.question == "Lisbon?"
    assert paused.status is SessionStatus.AUTHORIZATION
    assert paused.authorization is not None and paused.authorization.action == "pay the deposit"
    assert (await core.snapshot(question)).steps == asked.steps  # checked as paused: no more calls


async def test_a_failing_model_ends_the_session_failed(core: CoreUnderTest) -> None:
    """R18: a model failure ends the session failed with its error; the steps before it stay counted."""
    session_id = await core.create(scripted_task("Doomed", steps=2, end="fail", error="model overloaded", **QUICK))

    final = await core.settled(session_id)

    assert final.status is SessionStatus.FAILED
    assert final.error is not None and "model overloaded" in final.error
    assert len(final.steps) == 2
