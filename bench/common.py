"""The bench stack: a dev server, a worker and the programmable core in one event loop, default tuning."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from domain.limits import Policy
from domain.settings import Settings
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from worker import running_worker
from workflows.names import HELPER_OUTCOME, HELPER_OWNER, HELPER_STATE

BIN = Path(sys.executable).parent


@dataclass
class BenchStack:
    client: HelperClient
    store: HelperStore
    core: FakeCore
    settings: Settings


@contextlib.asynccontextmanager
async def bench_stack(policy: Policy) -> AsyncIterator[BenchStack]:
    """Everything real but the core, which the bench drives; the SQLite store of the default setup."""
    with tempfile.TemporaryDirectory() as scratch:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(BIN / "temporal"),
            data_converter=pydantic_data_converter,
            search_attributes=[HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME],
            dev_server_log_level="error",
        )
        core = FakeCore()
        try:
            async with serving_fake_core(core) as core_url:
                settings = Settings(
                    store_url=f"sqlite+aiosqlite:///{Path(scratch) / 'helpers.sqlite3'}",
                    results_dir=Path(scratch) / "results",
                    core_url=core_url,
                    chat_url="http://127.0.0.1:9",
                    task_queue="bench",
                    policy=policy,
                )
                store = await HelperStore.connect(settings.store_url, run_migrations=True)
                async with running_worker(env.client, settings):
                    yield BenchStack(HelperClient(settings, store, env.client), store, core, settings)
                await store.close()
        finally:
            await env.shutdown()


async def poll_until(condition: Callable[[], bool], interval: float = 0.01) -> None:
    """Wait for state outside this process (the core, the store) to change."""
    while True:
        if condition():
            return
        await asyncio.sleep(interval)


def describe(name: str, samples_ms: list[float]) -> str:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    p90 = ordered[min(len(ordered) - 1, round(0.90 * (len(ordered) - 1)))]
    return (
        f"{name}: n={len(ordered)} median={statistics.median(ordered):.0f} ms p90={p90:.0f} ms "
        f"p99={p99:.0f} ms max={ordered[-1]:.0f} ms"
    )
