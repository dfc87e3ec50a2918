"""Shared helpers for the reference core tests: request bodies, polling, a recording model."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from contracts.core_api import CreateSession, SessionStatus, Snapshot
from reference.core.model import Model, ModelReply, ModelRequest
from reference.core.model_catalog import ModelFactory, PreparedModel, scripted

FAST = {"step_ms": 10, "input_tokens": 1000, "input_growth": 500}


def session_body(
    task: str,
    *,
    key: str | None = None,
    owner: str = "ada",
    helper_id: str = "h1",
    boundary: tuple[str, ...] = (),
    language: str = "en",
    model: str = "scripted",
    max_steps: int = 80,
    max_input_tokens: int = 4_000_000,
) -> dict[str, Any]:
    return {
        "idempotency_key": key or f"key-{uuid.uuid4().hex}",
        "owner": owner,
        "helper_id": helper_id,
        "task": task,
        "boundary": list(boundary),
        "language": language,
        "model": model,
        "limits": {"max_steps": max_steps, "max_input_tokens": max_input_tokens},
    }


async def create(client: httpx.AsyncClient, task: str, **body: Any) -> str:
    response = await client.post("/v1/sessions", json=session_body(task, **body))
    assert response.status_code == 201, response.text
    session_id: str = response.json()["session_id"]
    return session_id


async def snapshot(client: httpx.AsyncClient, session_id: str) -> Snapshot:
    response = await client.get(f"/v1/sessions/{session_id}")
    assert response.status_code == 200, response.text
    return Snapshot.model_validate(response.json())


async def wait_for(
    client: httpx.AsyncClient,
    session_id: str,
    condition: Callable[[Snapshot], bool],
    within: float = 5.0,
) -> Snapshot:
    """Poll the snapshot until `condition` holds; fail with the last snapshot after `within` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        current = await snapshot(client, session_id)
        if condition(current):
            return current
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within} s; last snapshot: {current}")
        await asyncio.sleep(0.01)


async def settled(client: httpx.AsyncClient, session_id: str, within: float = 5.0) -> Snapshot:
    """The snapshot once the turn stopped making calls (paused or terminal)."""
    return await wait_for(client, session_id, lambda s: s.status is not SessionStatus.RUNNING, within)


class RecordingModel:
    """Wraps a model and keeps every request it gets, so tests can see what the model was told."""

    def __init__(self, inner: Model, requests: list[ModelRequest]) -> None:
        self._inner = inner
        self.requests = requests

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        return await self._inner.complete(request)


def recording_catalog() -> tuple[dict[str, ModelFactory], dict[str, list[ModelRequest]]]:
    """A catalog whose "scripted" model records its requests by helper id."""
    recorded: dict[str, list[ModelRequest]] = {}

    def factory(request: CreateSession) -> PreparedModel:
        prepared = scripted(request)
        requests = recorded.setdefault(request.helper_id, [])
        return PreparedModel(RecordingModel(prepared.model, requests), prepared.faults, prepared.holds)

    return {"scripted": factory}, recorded
