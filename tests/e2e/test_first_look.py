"""The open's first look at its session (R9, R44), on the dev server with real HTTP.

A session that ends within a second of its create ends the helper in the workflow task that opened it: no follow
activity, only the reset that cleans up after the outcome. A core that does not answer the look holds the open no
longer than the look's bound; the follow then judges the silence as any other.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from domain.activity_io import FIRST_LOOK_MAX_MS, first_look_bound_ms
from domain.outcome import OutcomeKind
from domain.rows import HelperRow
from protocol.names import helper_workflow_id
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from tests.e2e.conftest import E2E_FOLLOW, Stack, _stack
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import eventually, helper_request

pytestmark = pytest.mark.e2e


async def _final(stack: Stack, helper_id: str) -> HelperRow | None:
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def _scheduled(stack: Stack, helper_id: str) -> list[str]:
    handle = stack.env.client.get_workflow_handle(helper_workflow_id(stack.owner, helper_id))
    await handle.result()
    history = await handle.fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_quick_session_ends_its_helper_without_a_follow(stack: Stack) -> None:
    """The reference core (long poll) ends a one-step turn 20 ms after the create: the look's long poll sees it."""
    task = scripted_task("Look it up.", steps=1, step_ms=20, final_text="Found it.")
    await stack.client.start(helper_request(stack.owner, "quick", task))
    row = await eventually(functools.partial(_final, stack, "quick"), timeout=20)
    assert row.outcome_kind is OutcomeKind.COMPLETED and "Found it." in (row.summary or "")
    assert row.steps == 1
    assert await _scheduled(stack, "quick") == ["reset_session"]


async def test_a_longer_session_is_followed_after_the_look(stack: Stack) -> None:
    """Steps beyond the look's second: the follow activity takes over and sees the end."""
    task = scripted_task("Read three reports.", steps=3, step_ms=600, final_text="Read them.")
    await stack.client.start(helper_request(stack.owner, "longer", task))
    row = await eventually(functools.partial(_final, stack, "longer"), timeout=30)
    assert row.outcome_kind is OutcomeKind.COMPLETED and row.steps == 3
    assert await _scheduled(stack, "longer") == ["follow_session", "reset_session"]


async def test_a_core_silent_at_the_look_holds_the_open_no_longer_than_its_bound(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Snapshots hang from the start (creates answer) and a core call may take 10 s: the look gives up at its
    bound (about 2 s), so the follow starts long before one call's bound; it ends the helper failed after the
    core's silence, as without the look."""
    core = FakeCore(misbehave="hang", misbehave_on={"snapshot"})
    follow = E2E_FOLLOW.model_copy(update={"silence_ms": 2_000})
    async with (
        serving_fake_core(core) as core_url,
        running_chat() as chat_url,
        _stack(dev_env, tmp_path, core_url, chat_url, follow=follow, check_ms=10_000) as stack,
    ):
        started = time.monotonic()
        await stack.client.start(helper_request(stack.owner, "silent"))
        handle = stack.env.client.get_workflow_handle(helper_workflow_id(stack.owner, "silent"))
        await eventually(functools.partial(_follow_scheduled, handle), timeout=10)
        assert time.monotonic() - started < 2 + first_look_bound_ms(FIRST_LOOK_MAX_MS) / 1000
        row = await eventually(functools.partial(_final, stack, "silent"), timeout=60)
        assert row.outcome_kind is OutcomeKind.FAILED and "gave no answer" in (row.summary or "")
        assert row.session_id == "fake-1"


async def _follow_scheduled(handle: WorkflowHandle[Any, Any]) -> bool:
    history = await handle.fetch_history()
    return any(event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for event in history.events)
