"""What the integration tests share: the time-skipping stack (a fake core over real HTTP, a store, a worker, a
client), and for an activity run alone, the fake core and a store holding one running row."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from clients.core_client import CoreClient
from config.settings import Settings
from config.store_address import StoreAddress
from contracts.core_api import CreateSession, SessionLimits
from domain.rows import RowState
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import settings_for
from tests.store.test_helper_store import row
from worker import running_worker

# Nothing listens here: the chat is down for tests that are not about it.
CLOSED_PORT = "http://127.0.0.1:9"
# The idempotency key of the running row's session (`core_and_row`).
KEY = "helpers/anna/h1/run-1"


@dataclass
class TimeStack:
    env: WorkflowEnvironment
    core: FakeCore
    settings: Settings
    store: HelperStore
    client: HelperClient


@contextlib.asynccontextmanager
async def time_stack(
    env: WorkflowEnvironment, tmp_path: Path, core: FakeCore, *, store_url: str | None = None, **policy: object
) -> AsyncIterator[TimeStack]:
    """The fake core served, a store migrated (SQLite in `tmp_path`, or `store_url`), a worker polling, a
    client: everything closed on exit."""
    async with serving_fake_core(core) as core_url:
        settings = settings_for(tmp_path, core_url, CLOSED_PORT, skipping_time=True, **policy)
        if store_url is not None:
            settings = settings.model_copy(update={"store": StoreAddress.parse(store_url)})
        store = await HelperStore.connect(settings.store, run_migrations=True)
        try:
            async with running_worker(env.client, settings):
                yield TimeStack(env, core, settings, store, HelperClient(settings, store.reads, env.client))
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def core_and_row(tmp_path: Path, core: FakeCore) -> AsyncIterator[tuple[CoreClient, HelperStore]]:
    """The fake core served and a client of it (2 s calls), and a SQLite store in `tmp_path` holding anna's row
    h1, running at generation 2: everything closed on exit."""
    async with serving_fake_core(core) as url:
        client = CoreClient(url, 2_000)
        store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
        try:
            await store.insert_admitted(row("h1", state=RowState.RUNNING, generation=2))
            yield client, store
        finally:
            await store.close()
            await client.aclose()


async def create_session(client: CoreClient) -> str:
    """The session of anna's row h1, created under `KEY`; its id."""
    created = await client.create(
        CreateSession(
            idempotency_key=KEY,
            owner="anna",
            helper_id="h1",
            task="task",
            language="en",
            model="scripted",
            limits=SessionLimits(max_steps=80, max_input_tokens=4_000_000),
        )
    )
    return created.session_id
