"""A client for the core under test that checks the contract on every answer it reads.

Every snapshot the suite reads goes through `CoreUnderTest.snapshot`, which checks its shape (every
documented field present, valid as `contracts.core_api.Snapshot`, finite, consistent) and that it only
moved forward since the previous read of the same session: steps and cumulative input never
decrease, recorded steps never change, an ended session never changes (R11, R14, R19). So the
monotonic counters are checked across every poll of every test, not in one test only.

Deterministic behaviour comes from the model the core offers under `model` (default `scripted`),
which must follow the task's `helper-script` block (see docs/reference-core.md).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from contracts.core_api import CancelAnswer, CoreCapabilities, Problem, SessionCreated, SessionStatus, Snapshot

# Fields a core may leave out: `version` only comes with long poll, which is optional (R44); `choices` only with a
# structured question, which a core may never ask (R49).
OPTIONAL_SNAPSHOT_FIELDS = frozenset({"version", "choices"})
# A generous bound for a core to reach a state the script makes it reach within a second.
SETTLE_S = 10.0
POLL_S = 0.01

# What counts as "in Russian" and "in English" in a stop explanation (R32).
CYRILLIC = frozenset("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ")


def in_russian(text: str) -> bool:
    letters = [char for char in text if char.isalpha()]
    return bool(letters) and sum(char in CYRILLIC for char in letters) / len(letters) > 0.5


def in_english(text: str) -> bool:
    letters = [char for char in text if char.isalpha()]
    return bool(letters) and all(char.isascii() for char in letters)


def mentions_number(text: str, number: int) -> bool:
    """Whether `text` names `number`, however its digits are grouped (5000, 5,000, 5 000)."""
    ungrouped = re.sub(r"(?<=\d)[\s,.'\u00a0\u202f](?=\d{3}(?!\d))", "", text)
    return re.search(rf"(?<!\d){number}(?!\d)", ungrouped) is not None


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def session_body(
    task: str,
    *,
    model: str,
    key: str | None = None,
    owner: str = "conformance",
    helper_id: str | None = None,
    boundary: tuple[str, ...] = (),
    language: str = "en",
    max_steps: int = 80,
    max_input_tokens: int = 4_000_000,
) -> dict[str, Any]:
    return {
        "idempotency_key": key or unique("conformance-key"),
        "owner": owner,
        "helper_id": helper_id or unique("h"),
        "task": task,
        "boundary": list(boundary),
        "language": language,
        "model": model,
        "limits": {"max_steps": max_steps, "max_input_tokens": max_input_tokens},
    }


def check_problem(response: httpx.Response) -> Problem:
    """An error answer: 4xx with a JSON `Problem {code, message}`, both nonempty."""
    assert 400 <= response.status_code < 500, f"expected a 4xx, got {response.status_code}: {response.text}"
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    problem = Problem.model_validate(response.json())
    assert problem.code.strip() and problem.message.strip(), problem
    return problem


def check_shape(raw: Any, max_steps: int | None) -> Snapshot:
    """R11: the snapshot has every documented field, validates, and is finite and self-consistent."""
    assert isinstance(raw, dict), raw
    missing = set(Snapshot.model_fields) - OPTIONAL_SNAPSHOT_FIELDS - set(raw)
    assert not missing, f"the snapshot lacks {sorted(missing)}: {raw}"
    snapshot = Snapshot.model_validate(raw)
    steps = snapshot.steps
    assert [step.index for step in steps] == list(range(1, len(steps) + 1)), "step indices must be 1..n"
    if max_steps is not None:
        assert len(steps) <= max_steps, f"{len(steps)} steps exceed the step ceiling {max_steps}"
    for step in steps:
        assert step.cached_input_tokens <= step.input_tokens, f"cached exceeds the whole prompt: {step}"
    assert snapshot.input_tokens_total == sum(step.input_tokens for step in steps), (
        "input_tokens_total must be the cumulative input (cached included) of the steps"
    )
    status = snapshot.status
    if status is SessionStatus.RUNNING:
        assert snapshot.outcome is None, "a running session has no outcome yet"
    if status.is_terminal:
        assert snapshot.outcome is not None and snapshot.outcome.kind is status, "an ended session has its outcome"
        assert snapshot.outcome.text.strip(), "an outcome has a text"
        assert (snapshot.outcome.stop_reason is not None) == (status is SessionStatus.PARTIAL), (
            "a partial outcome, and only a partial one, names its stop reason"
        )
    if status is SessionStatus.QUESTION:
        assert snapshot.question, "a question pause carries the question"
    if status is SessionStatus.AUTHORIZATION:
        assert snapshot.authorization is not None and snapshot.authorization.action, "the action waiting is named"
    if status is SessionStatus.FAILED:
        assert snapshot.error, "a failed session says why"
    return snapshot


def check_progress(before: Snapshot, after: Snapshot) -> None:
    """R11, R14, R19: between two reads a session only moves forward; an ended one never changes."""
    if before.status.is_terminal:
        assert after == before, f"an ended session changed:\nbefore {before}\nafter  {after}"
        return
    assert len(after.steps) >= len(before.steps), "steps must never decrease"
    assert after.steps[: len(before.steps)] == before.steps, "recorded steps must never change"
    assert after.input_tokens_total >= before.input_tokens_total, "input_tokens_total must never decrease"
    assert after.actions[: len(before.actions)] == before.actions, "recorded actions must never change"
    assert after.refusals[: len(before.refusals)] == before.refusals, "recorded refusals must never change"
    assert after.finish_requested >= before.finish_requested and after.cancel_requested >= before.cancel_requested
    if before.status is not SessionStatus.RUNNING:  # paused: no further model calls
        assert after.steps == before.steps, "a paused session makes no further calls"


@dataclass
class CoreUnderTest:
    http: httpx.AsyncClient
    model: str
    _seen: dict[str, Snapshot] = field(default_factory=dict)
    _max_steps: dict[str, int] = field(default_factory=dict)

    def body(self, task: str, **fields: Any) -> dict[str, Any]:
        return session_body(task, model=self.model, **fields)

    async def create(self, task: str, **fields: Any) -> str:
        created = await self.create_or_refusal(task, **fields)
        assert isinstance(created, str), created
        return created

    async def create_or_refusal(self, task: str, **fields: Any) -> str | Problem:
        """Like `create`, but a 400 refusal comes back as its Problem: for the optional parts of the contract, which
        a core may refuse to script."""
        body = self.body(task, **fields)
        response = await self.http.post("/v1/sessions", json=body)
        if response.status_code == 400:
            return check_problem(response)
        assert response.status_code == 201, response.text
        created = SessionCreated.model_validate(response.json())
        assert created.created is True and created.session_id
        self._max_steps[created.session_id] = min(80, body["limits"]["max_steps"])
        return created.session_id

    async def read(self, session_id: str, **params: int) -> httpx.Response:
        return await self.http.get(f"/v1/sessions/{session_id}", params=params or None)

    def observe(self, session_id: str, raw: Any) -> Snapshot:
        """Check a snapshot body (from a read or a finish answer) and remember it for the next check."""
        current = check_shape(raw, self._max_steps.get(session_id))
        assert current.session_id == session_id
        previous = self._seen.get(session_id)
        if previous is not None:
            check_progress(previous, current)
        self._seen[session_id] = current
        return current

    async def snapshot(self, session_id: str) -> Snapshot:
        response = await self.read(session_id)
        assert response.status_code == 200, response.text
        return self.observe(session_id, response.json())

    async def wait_for(
        self, session_id: str, condition: Callable[[Snapshot], bool], within: float = SETTLE_S
    ) -> Snapshot:
        """Poll until `condition` holds; fail with the last snapshot after `within` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            current = await self.snapshot(session_id)
            if condition(current):
                return current
            if loop.time() > deadline:
                raise AssertionError(f"not reached within {within} s; last snapshot: {current}")
            await asyncio.sleep(POLL_S)

    async def settled(self, session_id: str, within: float = SETTLE_S) -> Snapshot:
        """The snapshot once the turn makes no more calls (paused or ended)."""
        return await self.wait_for(session_id, lambda s: s.status is not SessionStatus.RUNNING, within)

    async def finish(self, session_id: str) -> Snapshot:
        response = await self.http.post(f"/v1/sessions/{session_id}/finish")
        assert response.status_code == 202, response.text
        return self.observe(session_id, response.json())

    async def cancel(self, session_id: str) -> CancelAnswer:
        response = await self.http.post(f"/v1/sessions/{session_id}/cancel")
        assert response.status_code == 200, response.text
        return CancelAnswer.model_validate(response.json())

    def forget(self, session_id: str) -> None:
        self._seen.pop(session_id, None)


async def offering(core: CoreUnderTest, capability: str, core_is_reference: bool) -> CoreUnderTest:
    """The core under test when its `GET /v1/capabilities` advertises `capability`; else the test is skipped, since the
    runtime never uses that part of the contract with such a core. The reference core advertises every one."""
    response = await core.http.get("/v1/capabilities")
    offered = response.status_code == 200 and getattr(CoreCapabilities.model_validate(response.json()), capability)
    if not offered:
        assert not core_is_reference, f"the reference core offers {capability} and says so"
        pytest.skip(f"this core does not advertise {capability}: the runtime never asks it for that")
    return core
