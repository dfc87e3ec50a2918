"""The bench stack: a dev server, a worker and the programmable core in one event loop, default tuning."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
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
async def bench_stack(
    policy: Policy, store_url: str | None = None, core: FakeCore | None = None
) -> AsyncIterator[BenchStack]:
    """Everything real but the core, which the bench drives (`core`, by default one without long poll); the SQLite
    store of the default setup unless `store_url` names another (an empty database: the migrations run here)."""
    with tempfile.TemporaryDirectory() as scratch:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(BIN / "temporal"),
            data_converter=pydantic_data_converter,
            search_attributes=[HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME],
            dev_server_log_level="error",
        )
        core = core or FakeCore()
        try:
            async with serving_fake_core(core) as core_url:
                settings = Settings(
                    store=store_url or f"sqlite+aiosqlite:///{Path(scratch) / 'helpers.sqlite3'}",
                    results_dir=Path(scratch) / "results",
                    core_url=core_url,
                    chat_url="http://127.0.0.1:9",
                    task_queue="bench",
                    policy=policy,
                )
                store = await HelperStore.connect(settings.store, run_migrations=True)
                async with running_worker(env.client, settings):
                    yield BenchStack(HelperClient(settings, store.reads, env.client), store, core, settings)
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


# The name thread_cpu_seconds gives a process's first thread: in the worker and the service, the event loop.
MAIN_THREAD = "main"


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time so far of a process's threads, summed by thread name: the first thread as MAIN_THREAD (the event
    loop), the other Python threads as `python` (the worker's workflow tasks), the SDK core's Rust threads as
    `tokio-rt-worker`: what runs Python and what runs native code."""
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            name = MAIN_THREAD if task.name == str(pid) else (task / "comm").read_text().strip()
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
    metrics_url: str  # the server's own Prometheus metrics: its requests and its store's, by operation

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.asynccontextmanager
async def dev_server(extra: Sequence[str] = ()) -> AsyncIterator[DevServer]:
    """The Temporal dev server (in memory, headless) as its own process, so its CPU can be read apart; `extra`
    goes on its command line (e.g. `--dynamic-config-value`)."""
    port, metrics_port = free_port(), free_port()
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
        "--metrics-port",
        str(metrics_port),
        "--headless",
        "--log-level",
        "error",
        *extra,
    ]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    with tempfile.TemporaryFile() as errors:  # what a server that refuses its command line says
        process = await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL, stderr=errors)
        server = DevServer(f"127.0.0.1:{port}", process, f"http://127.0.0.1:{metrics_port}/metrics")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await Client.connect(server.address)
                    break
                except RuntimeError as error:
                    if time.monotonic() > deadline or process.returncode is not None:
                        errors.seek(0)
                        said = errors.read().decode(errors="replace").strip()[-2000:]
                        raise RuntimeError(f"the dev server did not start ({' '.join(extra)}): {said}") from error
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


# --- the production shape: a worker process, the reference core and PostgreSQL (capacity, owners, fairness) ----


def process_rss_bytes(pid: int) -> int:
    """Resident memory of one process now (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_files(pid: int) -> tuple[int, int]:
    """File descriptors a process holds now, and its soft limit (/proc/<pid>/limits)."""
    held = len(os.listdir(f"/proc/{pid}/fd"))
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return held, int(line.split()[3])
    return held, 0


def machine_busy_seconds() -> tuple[float, float]:
    """The machine's CPU seconds so far, busy and in all, summed over its cores (/proc/stat); steal counts busy."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


async def scrape_metrics(url: str) -> dict[str, float]:
    """A Prometheus text page as `name{labels}` -> value (the SDK's worker metrics)."""
    import httpx

    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        page = (await client.get(url)).text
    values: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[key] = float(value)
    return values


def metric(values: dict[str, float], name: str, *label_parts: str) -> float | None:
    """The sum of a metric's series whose labels hold every one of `label_parts`; None when it has none."""
    found = [
        value
        for key, value in values.items()
        if (key == name or key.startswith(name + "{")) and all(part in key for part in label_parts)
    ]
    return sum(found) if found else None


def repository_root() -> Path:
    return Path(__file__).resolve().parents[2]


@dataclass
class ProcessStack:
    """A dev server, the reference core and a worker, each its own process, and a fresh PostgreSQL database."""

    server: DevServer
    core: asyncio.subprocess.Process
    core_url: str
    worker: asyncio.subprocess.Process
    settings: Settings
    client: HelperClient
    store: HelperStore
    database_url: str
    metrics_url: str  # the SDK's metrics (HELPER_METRICS_BIND)
    health_url: str  # the worker's own /metrics (HELPER_HEALTH_BIND): helper_runtime_*
    scratch: Path
    environment: dict[str, str]  # the worker's, for other processes of the bench


async def wait_for_http(url: str, process: asyncio.subprocess.Process, within_s: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            if time.monotonic() > deadline or process.returncode is not None:
                raise RuntimeError(f"{url} did not answer (exit {process.returncode})")
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def process_stack(
    postgres_url: str, worker_env: dict[str, str], server_args: Sequence[str] = ()
) -> AsyncIterator[ProcessStack]:
    """Everything as production starts it, on loopback: `python worker.py` with its environment (the settings
    of `worker_env` over the stack's addresses), the reference core (`python -m reference.core`), the reference
    chat in this process, PostgreSQL for the store (a fresh database, dropped at the end). Each process's log is
    in the scratch directory, kept when the bench fails."""
    from codec.encryption import new_key
    from protocol.connection import connect_for
    from reference.chat.server import running_chat
    from tests.helpers import fresh_postgres_database

    root = repository_root()
    scratch = Path(tempfile.mkdtemp(prefix="helper-scale-"))
    failed = True
    try:
        async with (
            dev_server(server_args) as server,
            fresh_postgres_database(postgres_url) as database_url,
            running_chat() as chat_url,
        ):
            core_port = free_port()
            core_log = (scratch / "core.log").open("wb")
            core = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reference.core",
                "--host",
                "127.0.0.1",
                "--port",
                str(core_port),
                "--db",
                str(scratch / "core.sqlite3"),
                "--log-level",
                "warning",
                cwd=root,
                stdout=core_log,
                stderr=core_log,
            )
            core_url = f"http://127.0.0.1:{core_port}"
            metrics_bind = f"127.0.0.1:{free_port()}"
            health_bind = f"127.0.0.1:{free_port()}"
            env = {
                **os.environ,
                "PYTHONPATH": str(root),
                "TEMPORAL_ADDRESS": server.address,
                "HELPER_TASK_QUEUE": "helpers-bench",
                "HELPER_STORE_URL": database_url,
                "HELPER_MIGRATE_ON_START": "true",
                "HELPER_RESULTS_DIR": str(scratch / "results"),
                "HELPER_CORE_URL": core_url,
                "HELPER_CHAT_URL": chat_url,
                "HELPER_CODEC_KEYS": f"bench:{new_key()}",  # as deployed: every payload encrypted
                "HELPER_METRICS_BIND": metrics_bind,
                "HELPER_HEALTH_BIND": health_bind,
                "HELPER_LOG_LEVEL": os.environ.get("HELPER_LOG_LEVEL", "WARNING"),
                **worker_env,
            }
            settings = Settings.from_env(env)
            store = await HelperStore.connect(database_url, run_migrations=True)
            worker_log = (scratch / "worker.log").open("wb")
            worker = await asyncio.create_subprocess_exec(
                sys.executable, str(root / "worker.py"), env=env, cwd=root, stdout=worker_log, stderr=worker_log
            )
            try:
                await wait_for_http(f"{core_url}/healthz", core)
                metrics_url = f"http://{metrics_bind}/metrics"
                await wait_for_http(metrics_url, worker)
                # The SDK core's retry warnings (a flood meets the server's update limits) would drown the figures.
                quiet = LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
                temporal = await connect_for(settings, Runtime(telemetry=TelemetryConfig(logging=quiet)))
                yield ProcessStack(
                    server=server,
                    core=core,
                    core_url=core_url,
                    worker=worker,
                    settings=settings,
                    client=HelperClient(settings, store.reads, temporal),
                    store=store,
                    database_url=database_url,
                    metrics_url=metrics_url,
                    health_url=f"http://{health_bind}/metrics",
                    scratch=scratch,
                    environment=env,
                )
                failed = False
            finally:
                await stop_process(worker)
                await stop_process(core)
                await store.close()
                worker_log.close()
                core_log.close()
    finally:
        if failed:
            print(f"the processes' logs are kept in {scratch}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
