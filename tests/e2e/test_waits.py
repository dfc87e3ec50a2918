"""Every wait for the owner ends (R54), end to end on the dev server with bounds of seconds set through the settings:
a delivered question is reminded at each offset and expires, each told to the reference chat once, across the
coordinator continuing as new between them, and a late answer is refused `expired`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from domain.limits import WaitPolicy
from domain.rows import RowState
from protocol.errors import HelperRefused
from protocol.names import coordinator_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from starter.inputs import answer_request, delivered_request, read_request
from tests.e2e.conftest import Stack, _stack, finished_row
from tests.helpers import eventually, helper_request
from workflows import coordinator

pytestmark = pytest.mark.e2e

# Reminded 3 s and 6 s after delivery, expired at 9 s.
WAIT = WaitPolicy(remind_after_ms=(3_000, 6_000), expire_after_ms=9_000)


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, wait=WAIT) as built,
    ):
        yield built


async def _kinds(stack: Stack, count: int) -> list[dict[str, Any]] | None:
    events = await stack.chat_events()
    return events if len(events) >= count else None


async def test_a_question_nobody_answers_is_reminded_expires_and_refuses_a_late_answer_across_continue_as_new(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator, "MAX_MESSAGES_PER_RUN", 3)  # the worker runs in this process
    owner = stack.owner
    task = scripted_task("Plan.", steps=1, step_ms=20, end="question", question="Where?", options=[("walk", "Walk")])
    await stack.client.start(helper_request(owner, "trip", task))
    await finished_row(stack, "trip")
    await eventually(lambda: _kinds(stack, 1), timeout=30)
    await stack.client.read(read_request(owner, "t-1", ["trip"]))
    await stack.client.delivered(delivered_request(owner, "t-1", answer_chars=40))
    delivered_at = time.monotonic()
    events = await eventually(lambda: _kinds(stack, 4), timeout=40)
    assert [event["kind"] for event in events] == ["ready", "reminder", "reminder", "expired"]
    assert time.monotonic() - delivered_at >= 9 - 1  # not before its bound (the row's clock is the server's)
    row = await stack.store.get(owner, "trip")
    assert row is not None and row.state is RowState.EXPIRED
    with pytest.raises(HelperRefused) as refused:
        await stack.client.answer(answer_request(owner, "trip", "v", option_id="walk"))
    assert refused.value.code == "expired"
    runs = [run async for run in stack.env.client.list_workflows(f'WorkflowId = "{coordinator_id(owner)}"')]
    assert len(runs) >= 2, f"the coordinator was to continue as new, it ran {len(runs)} runs"
    assert len(await stack.chat_events()) == 4, "a notice was told twice"
