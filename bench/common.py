"""The bench stack: a dev server, a worker and the programmable core in one event loop, default tuning."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from domain.limits import Policy
from protocol.names import HELPER_OUTCOME, HELPER_OWNER, HELPER_STATE, SEARCH_ATTRIBUTES
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, serving_fake_core
from worker import running_worker

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


# --- processes of their own: a dev server and workers whose CPU the benches measure apart ---------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process so far, from /proc (Linux): the dev server's, a worker's."""
    return process_cpu_seconds_of(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time so far of a process's threads, summed by thread name (Python threads are all `python`; the
    SDK core's Rust threads are `tokio-runtime-w`): what runs Python and what runs native code."""
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            name = (task / "comm").read_text().strip()
            by_name[name] = by_name.get(name, 0.0) + process_cpu_seconds_of(task / "stat")
    return by_name


def process_cpu_seconds_of(stat_file: Path) -> float:
    stat = stat_file.read_text()
    # The command name may hold spaces; the fields after its closing parenthesis start at field 3 (state).
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


@dataclass
class DevServer:
    address: str
    process: asyncio.subprocess.Process

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.asynccontextmanager
async def dev_server() -> AsyncIterator[DevServer]:
    """The Temporal dev server (in memory, headless) as its own process, so its CPU can be read apart."""
    port = free_port()
    command = [
        str(BIN / "temporal"),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ui-port",
        str(free_port()),
        "--headless",
        "--log-level",
        "error",
    ]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    process = await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = DevServer(f"127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await Client.connect(server.address)
                break
            except RuntimeError:
                if time.monotonic() > deadline or process.returncode is not None:
                    raise
                await asyncio.sleep(0.2)
        yield server
    finally:
        await stop_process(process)


async def stop_process(process: asyncio.subprocess.Process, wait_s: float = 15) -> None:
    """SIGTERM, then SIGKILL if it does not go within `wait_s`."""
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), wait_s)
    except TimeoutError:
        process.kill()
        await process.wait()


async def settled_cpu(pids: list[int], quiet_s: float = 0.5, quiet_cpu_s: float = 0.01, most_s: float = 10) -> None:
    """Wait until these processes are idle (less than `quiet_cpu_s` CPU in `quiet_s`): work that follows
    the last completion (notices, outbox offers, cleanup) belongs to the measured helpers too."""
    started = time.monotonic()
    before = sum(process_cpu_seconds(pid) for pid in pids)
    while time.monotonic() - started < most_s:
        await asyncio.sleep(quiet_s)
        now = sum(process_cpu_seconds(pid) for pid in pids)
        if now - before < quiet_cpu_s * len(pids):
            return
        before = now


def spread(values: list[float]) -> str:
    """A range for repeated measurements: `12.3` or `12.3 (11.8–13.0)`."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"
