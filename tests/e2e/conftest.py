"""The end-to-end stack in one event loop: dev server, worker, reference core and chat over real HTTP."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from domain.limits import FollowTuning
from domain.settings import Settings
from reference_chat.server import running_chat
from reference_core.server import running_core
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.helpers import settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e

# Real time on the dev server: poll fast, short windows, resume at once.
E2E_FOLLOW = FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200, silence_ms=60_000)


@dataclass
class Stack:
    env: WorkflowEnvironment
    settings: Settings
    client: HelperClient
    store: HelperStore
    core_url: str
    chat_url: str
    owner: str

    async def chat_events(self, owner: str | None = None) -> list[dict[str, object]]:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{self.chat_url}/v1/owners/{owner or self.owner}/events")
            return list(response.json())


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_core(tmp_path / "core.sqlite3") as core_url, running_chat() as chat_url:
        settings = settings_for(tmp_path, core_url, chat_url, follow=E2E_FOLLOW)
        store = await HelperStore.connect(settings.store_url)
        async with running_worker(dev_env.client, settings):
            client = HelperClient(settings, store, dev_env.client)
            yield Stack(dev_env, settings, client, store, core_url, chat_url, f"owner-{uuid.uuid4().hex[:8]}")
        await store.close()
