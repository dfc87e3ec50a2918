"""A core restart: running turns become interrupted and are never replayed; everything else is kept."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from contracts.core_api import SessionStatus
from reference.core.script import scripted_task
from reference.core.server import running_core
from tests.reference.core.support import FAST, create, session_body, settled, snapshot, wait_for

RUNNING = {"end": "run", "step_ms": 20, "input_tokens": 1000, "input_growth": 100}


async def test_a_running_turn_is_interrupted_by_a_restart_and_not_replayed(tmp_path: Path) -> None:
    """R24, R9: after a restart the running session is interrupted, never continues, and its key holds."""
    db = tmp_path / "core.sqlite3"
    english = session_body(scripted_task("Keep going", **RUNNING), key="key-restart-en")
    russian = session_body(scripted_task("Продолжай", **RUNNING), key="key-restart-ru", language="ru")
    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        ids = [(await client.post("/v1/sessions", json=body)).json()["session_id"] for body in (english, russian)]
        before = [await wait_for(client, session_id, lambda s: len(s.steps) >= 2) for session_id in ids]

    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        after = [await snapshot(client, session_id) for session_id in ids]
        await asyncio.sleep(0.1)  # five step lengths: nothing is replayed
        later = [await snapshot(client, session_id) for session_id in ids]
        recreate = await client.post("/v1/sessions", json=english)

    for was, now in zip(before, after, strict=True):
        assert now.status is SessionStatus.INTERRUPTED
        assert now.outcome is not None and now.outcome.kind is SessionStatus.INTERRUPTED
        assert len(now.steps) >= len(was.steps)  # a step may have finished before the stop
        assert now.last_message in now.outcome.text
    assert after == later
    assert after[0].outcome is not None and after[0].outcome.text.startswith("The core restarted")
    assert after[1].outcome is not None and after[1].outcome.text.startswith("Ядро перезапустилось")
    assert recreate.status_code == 200
    assert recreate.json() == {"session_id": ids[0], "created": False}


async def test_paused_and_ended_sessions_keep_their_state_across_a_restart(tmp_path: Path) -> None:
    """R24, R16: only running turns are interrupted; a paused question can still be cancelled after."""
    db = tmp_path / "core.sqlite3"
    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        question = await create(client, scripted_task("Ask", steps=1, end="question", **FAST))
        completed = await create(client, scripted_task("Finish", steps=1, **FAST))
        before = [await settled(client, session_id) for session_id in (question, completed)]

    async with running_core(db) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        after = [await snapshot(client, session_id) for session_id in (question, completed)]
        cancel = await client.post(f"/v1/sessions/{question}/cancel")

    assert after == before
    assert cancel.json() == {"stopped": True, "status": "cancelled"}


async def test_the_core_restarts_on_the_same_port(tmp_path: Path) -> None:
    """The demo and tests can restart the core at the same address."""
    db = tmp_path / "core.sqlite3"
    async with running_core(db) as first_url:
        pass
    port = int(first_url.rsplit(":", 1)[1])
    async with running_core(db, port) as second_url, httpx.AsyncClient(base_url=second_url) as client:
        assert second_url == first_url
        assert (await client.get("/healthz")).json() == {"ok": True}
