"""The end-to-end stack in one event loop: dev server, worker, reference core and chat over real HTTP."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from domain.limits import FollowTuning
from domain.rows import HelperRow
from reference.chat.server import running_chat
from reference.core.server import running_core
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.e2e.local_run import Running
from tests.fakes.fake_core import FakeCore, serving_fake_core
from tests.helpers import eventually, settings_for
from worker import running_worker

pytestmark = pytest.mark.e2e

# Real time on the dev server: poll fast, short windows, resume at once.
# Long polls of 2 s (the reference core offers them); a killed worker's follow is retried after 25 s.
E2E_FOLLOW = FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200, silence_ms=60_000, wait_ms=2_000)


@dataclass
class Stack:
    env: WorkflowEnvironment
    settings: Settings
    client: HelperClient
    store: HelperStore
    core_url: str
    chat_url: str
    owner: str

    async def chat_events(self, owner: str | None = None) -> list[dict[str, Any]]:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{self.chat_url}/v1/owners/{owner or self.owner}/events")
            return list(response.json())


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    """The reference core and chat, a worker, a store: the real parts, in one event loop."""
    async with reference_stack(dev_env, tmp_path) as built:
        yield built


@contextlib.asynccontextmanager
async def reference_stack(
    env: WorkflowEnvironment, tmp_path: Path, *, offers_follow_ups: bool = True, offers_grants: bool = True
) -> AsyncIterator[Stack]:
    """The stack on the reference core, which may play a core without an optional part (`offers_follow_ups=False`,
    `offers_grants=False`), and the reference chat."""
    async with (
        running_core(
            tmp_path / "core.sqlite3", offers_follow_ups=offers_follow_ups, offers_grants=offers_grants
        ) as core_url,
        running_chat() as chat_url,
        _stack(env, tmp_path, core_url, chat_url) as built,
    ):
        yield built


@pytest.fixture
async def fake_stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[tuple[Stack, FakeCore]]:
    """A programmable core that misbehaves on cue; HTTP calls bounded at 400 ms to keep hangs short."""
    core = FakeCore()
    async with serving_fake_core(core) as core_url, running_chat() as chat_url:
        follow = E2E_FOLLOW.model_copy(update={"silence_ms": 2_000, "bad_answers": 3})
        async with _stack(dev_env, tmp_path, core_url, chat_url, follow=follow, check_ms=400) as built:
            yield built, core


@contextlib.asynccontextmanager
async def _stack(
    env: WorkflowEnvironment, tmp_path: Path, core_url: str, chat_url: str, **policy: Any
) -> AsyncIterator[Stack]:
    policy.setdefault("follow", E2E_FOLLOW)
    settings = settings_for(tmp_path, core_url, chat_url, **policy)
    store = await HelperStore.connect(settings.store, run_migrations=True)
    try:
        async with running_worker(env.client, settings):
            client = HelperClient(settings, store.reads, env.client)
            yield Stack(env, settings, client, store, core_url, chat_url, f"owner-{uuid.uuid4().hex[:8]}")
    finally:
        await store.close()


async def final_row(stack: Stack, helper_id: str) -> HelperRow | None:
    """The helper's row once it has its outcome; None before."""
    row = await stack.store.get(stack.owner, helper_id)
    return row if row is not None and row.outcome_kind is not None else None


async def finished_row(stack: Stack, helper_id: str, timeout: float = 30) -> HelperRow:
    """The helper's row, waited for until it has its outcome."""
    row: HelperRow = await eventually(functools.partial(final_row, stack, helper_id), timeout=timeout)
    return row


def core_sessions(core_db: Path, helper_id: str) -> list[dict[str, Any]]:
    """The reference core's sessions of one helper, as its store holds them."""
    with sqlite3.connect(core_db) as db:
        db.row_factory = sqlite3.Row
        found = db.execute(
            "SELECT session_id, request, continue_from, reset_at FROM sessions WHERE helper_id = ?", (helper_id,)
        ).fetchall()
    return [dict(row) for row in found]


def used_grants(core_db: Path) -> list[str]:
    """The sessions in which the reference core performed a grant's action, one per grant used (R55)."""
    with sqlite3.connect(core_db) as db:
        return [row[0] for row in db.execute("SELECT session_id FROM used_grants ORDER BY used_at")]


@pytest.fixture
def cleanup() -> Iterator[list[Running]]:
    """The `python -m tools.demo run` processes a test starts (`tests.e2e.local_run`), killed if a test left any."""
    started: list[Running] = []
    yield started
    for running in started:
        for entry in running.left_behind():
            if entry.startswith("pid "):
                pid = int(entry.split()[1].rstrip(":"))
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
