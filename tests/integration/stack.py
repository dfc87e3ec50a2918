"""The time-skipping stack the integration tests share: a fake core over real HTTP, a store, a worker, a client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from config.store_address import StoreAddress
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import settings_for
from worker import running_worker

# Nothing listens here: the chat is down for tests that are not about it.
CLOSED_PORT = "http://127.0.0.1:9"


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
