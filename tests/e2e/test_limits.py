"""Effective limits (R1): the minimum of the defaults, the initiating session's and the request's limits."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.chat import ChatActivities
from clients.chat_client import ChatClient
from domain.book import EventState
from domain.limits import LimitOverrides
from domain.messages.activities import OfferEvent
from store.helper_store import HelperStore
from tests.e2e.conftest import Stack
from tests.fakes.fake_core import FakeCore
from tests.helpers import chat_events, eventually, helper_request

pytestmark = pytest.mark.e2e


async def test_the_core_and_the_timers_get_the_tightest_limits(fake_stack: tuple[Stack, FakeCore]):
    """R1, R10, R14: the session's ceilings passed to the core and the helper's deadline are the field-wise
    minimum of the defaults (80 steps, 4,000,000 input, 45 min), the initiating session's and the request's."""
    stack, core = fake_stack
    request = helper_request(
        stack.owner,
        "tight",
        session_limits=LimitOverrides(max_steps=50, max_input_tokens=3_000_000, deadline_ms=1_800_000),
        limits=LimitOverrides(max_steps=20, deadline_ms=2_400_000, ceiling_tokens=500_000),
    )
    await stack.client.start(request)
    session = await eventually(lambda: core.session_of("tight"))
    assert (session.request.limits.max_steps, session.request.limits.max_input_tokens) == (20, 3_000_000)
    row = await eventually(lambda: _started(stack))
    assert (row.limits.deadline_ms, row.limits.ceiling_tokens, row.limits.grace_ms) == (1_800_000, 500_000, 120_000)
    assert row.deadline_at - row.started_at == timedelta(minutes=30)
    await stack.client.close(stack.owner, "tight")


async def _started(stack: Stack):
    row = await stack.store.get(stack.owner, "tight")
    return row if row is not None and row.deadline_at is not None and row.started_at is not None else None


async def test_an_unreachable_chat_is_a_failed_attempt(tmp_path: Path):
    """R26: when the chat cannot be reached at all, the event was certainly not taken: state failed, no
    receipt, and the attempt is recorded in the store."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    chat = ChatClient("http://127.0.0.1:9", timeout_ms=2_000)
    try:
        offer = OfferEvent(owner="ida", key="helpers-ready:ida:1", helper_ids=["h1"], language="en", attempts=0)
        result = await ActivityEnvironment().run(ChatActivities(store, chat).offer_chat_event, offer)
        assert result.state is EventState.FAILED and result.receipt_id is None
        recorded = await chat_events(store, "ida")
        assert [(e.key, e.state, e.attempts) for e in recorded] == [("helpers-ready:ida:1", "failed", 1)]
    finally:
        await chat.aclose()
        await store.close()
