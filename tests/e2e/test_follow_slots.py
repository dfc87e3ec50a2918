"""A worker whose follow slots are all taken still answers admissions and runs the short activities (R46).

The follows have a task queue and slots of their own; here the worker has one follow slot and an owner runs three
helpers, whose sessions stay running until the test ends them. Every admission is answered at once, every
session is opened (the open is a short activity), one helper is followed and the two others' rows say that no
worker follows them yet; as each helper ends, the next one is followed, and all three reach their outcomes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from contracts.core_api import SessionStatus
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from reference.chat.server import running_chat
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.conftest import E2E_FOLLOW
from tests.fakes.fake_core import FakeCore, FakeSession, serving_fake_core
from tests.helpers import eventually, helper_request, settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e

HELPERS = ("h1", "h2", "h3")
WAIT_S = 30.0  # every wait below: an admission, a session opening, a follow starting, an outcome


@contextlib.asynccontextmanager
async def _one_follow_slot(
    env: WorkflowEnvironment, tmp_path: Path, core: FakeCore
) -> AsyncIterator[tuple[HelperClient, HelperStore]]:
    async with serving_fake_core(core) as core_url, running_chat() as chat_url:
        # A follow attempt ends with its window and frees its slot for a waiting follow: one window longer than the
        # test, so the slot changes hands only when a helper ends.
        follow = E2E_FOLLOW.model_copy(update={"window_ms": 300_000})
        settings = settings_for(tmp_path, core_url, chat_url, follow=follow).model_copy(
            update={"max_concurrent_follows": 1}
        )
        store = await HelperStore.connect(settings.store, run_migrations=True)
        try:
            async with running_worker(env.client, settings):
                yield HelperClient(settings, store.reads, env.client), store
        finally:
            await store.close()


async def _rows(store: HelperStore, owner: str) -> list[HelperRow]:
    rows = [await store.get(owner, helper_id) for helper_id in HELPERS]
    return [row for row in rows if row is not None]


async def _followed(store: HelperStore, owner: str, at_least: int = 1) -> list[str] | None:
    """The helpers a worker has begun to follow, once there are `at_least` of them."""
    helpers = [row.helper_id for row in await _rows(store, owner) if row.follow_started_at is not None]
    return helpers if len(helpers) >= at_least else None


async def _session(core: FakeCore, helper_id: str) -> FakeSession:
    async def opened() -> FakeSession | None:
        return core.session_of(helper_id)

    session: FakeSession = await eventually(opened, timeout=WAIT_S)
    return session


async def test_admissions_and_opens_go_on_while_the_follow_slots_are_taken(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    core = FakeCore(long_poll="honest")
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    async with _one_follow_slot(dev_env, tmp_path, core) as (client, store):
        admissions = [await client.start(helper_request(owner, helper_id)) for helper_id in HELPERS]
        assert [a.status for a in admissions] == [RowState.RUNNING] * 3, admissions
        sessions: list[FakeSession] = [await _session(core, helper_id) for helper_id in HELPERS]

        first = await eventually(lambda: _followed(store, owner), timeout=WAIT_S)
        assert len(first) == 1, f"one follow slot, yet followed: {first}"
        rows = await _rows(store, owner)
        assert all(row.state is RowState.RUNNING for row in rows), rows
        assert sum(row.follow_started_at is None for row in rows) == 2, "the others wait for a follow slot"

        ended: list[str] = []
        for _ in HELPERS:
            now_followed = await eventually(lambda: _followed(store, owner, len(ended) + 1), timeout=WAIT_S)
            helper_id = next(h for h in now_followed if h not in ended)
            sessions[HELPERS.index(helper_id)].end(SessionStatus.COMPLETED, f"{helper_id} done")
            ended.append(helper_id)

        async def outcomes() -> list[OutcomeKind | None] | None:
            kinds = [row.outcome_kind for row in await _rows(store, owner)]
            return kinds if all(kind is not None for kind in kinds) else None

        assert await eventually(outcomes, timeout=WAIT_S) == [OutcomeKind.COMPLETED] * 3
        assert sorted(ended) == sorted(HELPERS)
