"""Helpers completed per second and worker CPU per helper, against bare Temporal on the same dev server.

    .venv/bin/python -m tools.bench.helper_rate [--helpers 200] [--parallel 20] [--rounds 1] [--py-spy FILE]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1/postgres]

One dev server (in memory), two worker processes, the driver here:
- bare: a trivial workflow that runs one trivial activity, on a default Worker (sandboxed, default converter);
- project: `python worker.py` as deployed (codec key, SQLite store, results directory), with a core whose
  sessions finish at their first snapshot (the fake core, over HTTP) and the reference chat, idle.
`--parallel` owners each admit their share of the helpers one after the other (so the owner's slots are never
the limit) and wait for the helper's workflow to complete; the bare lanes do the same with bare workflows.
Each worker's and the server's CPU come from /proc, from a quiet start until everything is quiet again after
the last completion (the coordinator's notices and chat offers count for their helpers). One warm-up item per
lane runs first, unmeasured. With `--py-spy FILE` the project worker is sampled during the last project phase
and its CPU is summarised by part (py-spy must be installed: `.venv/bin/pip install py-spy`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

# The bare workflow lives in this module, so everything else it imports is passed through the sandbox
# (a plain application would keep its workflow module that lean).
with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker

    from codec.encryption import new_key
    from config.settings import Settings
    from domain.requests import HelperRequest
    from protocol.connection import connect_for
    from protocol.deadlines import reply_by
    from protocol.names import helper_workflow_id
    from protocol.update_senders import admit
    from reference.chat.server import running_chat
    from tests.fakes.fake_core import DoneAtOnce, FakeCore, serving_fake_core
    from tools.bench.common import (
        DevServer,
        dev_server,
        process_cpu_seconds,
        settled_cpu,
        spread,
        stop_process,
        thread_cpu_seconds,
    )

BARE_QUEUE = "bare"
PROJECT_QUEUE = "helpers-bench"
TARGET_RATE_RATIO = 0.5
ITEM_TIMEOUT_S = 60
# A guard, as a ratio to the bare worker in the same run: the machine's speed drifts, the ratio does not.
TARGET_WORKER_CPU_RATIO = 3.0


# --- the bare baseline: one trivial activity per workflow -----------------------------------------------


@activity.defn(name="bare_step")
async def bare_step(text: str) -> str:
    return text


@workflow.defn(name="BareWorkflow")
class BareWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(bare_step, text, start_to_close_timeout=timedelta(seconds=10))


async def serve_bare_worker(address: str) -> None:
    """The baseline's worker process: a default Worker until SIGTERM."""
    client = await Client.connect(address)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(client, task_queue=BARE_QUEUE, workflows=[BareWorkflow], activities=[bare_step]):
        await stop.wait()


# --- measuring ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    completed: int
    seconds: float
    worker_cpu_s: float
    server_cpu_s: float
    driver_cpu_s: float
    worker_threads_s: dict[str, float]

    @property
    def rate(self) -> float:
        return self.completed / self.seconds

    @property
    def worker_ms(self) -> float:
        return 1000 * self.worker_cpu_s / self.completed

    @property
    def server_ms(self) -> float:
        return 1000 * self.server_cpu_s / self.completed

    @property
    def driver_ms(self) -> float:
        return 1000 * self.driver_cpu_s / self.completed


async def measure(worker_pid: int, server_pid: int, run: Callable[[], Awaitable[int]]) -> Phase:
    await settled_cpu([worker_pid, server_pid])
    worker_before, server_before = process_cpu_seconds(worker_pid), process_cpu_seconds(server_pid)
    driver_before = process_cpu_seconds(os.getpid())
    threads_before = thread_cpu_seconds(worker_pid)
    started = time.perf_counter()
    completed = await run()
    seconds = time.perf_counter() - started
    await settled_cpu([worker_pid, server_pid])
    threads_after = thread_cpu_seconds(worker_pid)
    return Phase(
        completed=completed,
        seconds=seconds,
        worker_cpu_s=process_cpu_seconds(worker_pid) - worker_before,
        server_cpu_s=process_cpu_seconds(server_pid) - server_before,
        driver_cpu_s=process_cpu_seconds(os.getpid()) - driver_before,
        worker_threads_s={name: spent - threads_before.get(name, 0.0) for name, spent in threads_after.items()},
    )


async def in_lanes(lanes: int, per_lane: int, one: Callable[[int, int], Awaitable[None]]) -> int:
    """`lanes` callers, each doing `per_lane` items one after the other; returns how many completed."""

    async def lane(number: int) -> None:
        for index in range(per_lane):
            async with asyncio.timeout(ITEM_TIMEOUT_S):  # a dead worker fails the bench instead of hanging it
                await one(number, index)

    await asyncio.gather(*(lane(number) for number in range(lanes)))
    return lanes * per_lane


# --- the stack -------------------------------------------------------------------------------------------


@dataclass
class Stack:
    server: DevServer
    bare_client: Client
    bare_worker: asyncio.subprocess.Process | None
    project_client: Client
    project_worker: asyncio.subprocess.Process
    settings: Settings
    run_id: str
    logs: Path


def _root() -> Path:
    # Not at import: the sandbox imports this module for the bare workflow and refuses Path.resolve there.
    return Path(__file__).resolve().parents[2]


async def _spawn(command: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("wb") as output:
        return await asyncio.create_subprocess_exec(*command, env=env, cwd=_root(), stdout=output, stderr=output)


def _project_env(
    server: DevServer, scratch: Path, core_url: str, chat_url: str, max_rows: int | None, store_url: str | None
) -> dict[str, str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "HELPER_TASK_QUEUE": PROJECT_QUEUE,
        "HELPER_STORE_URL": store_url or f"sqlite+aiosqlite:///{scratch / 'helpers.sqlite3'}",
        "HELPER_MIGRATE_ON_START": "true",
        "HELPER_RESULTS_DIR": str(scratch / "results"),
        "HELPER_CORE_URL": core_url,
        "HELPER_CHAT_URL": chat_url,
        "HELPER_CODEC_KEYS": f"bench:{new_key()}",  # as deployed: every payload encrypted
        "HELPER_LOG_LEVEL": os.environ.get("HELPER_LOG_LEVEL", "INFO"),
    }
    if max_rows is not None:
        env["HELPER_MAX_ROWS"] = str(max_rows)
    return env


class run_stack:
    """The dev server, the fake core and the reference chat here; the project's worker (and, with `bare`, the
    baseline's) as processes of their own."""

    def __init__(
        self,
        max_rows: int | None,
        *,
        bare: bool = True,
        worker_script: Path | None = None,
        postgres: str | None = None,
    ) -> None:
        self.max_rows = max_rows
        self.bare = bare
        self.worker_script = worker_script
        self.postgres = postgres
        self._exits: list[Callable[[], Awaitable[Any]]] = []

    async def __aenter__(self) -> Stack:
        scratch = self.scratch = Path(tempfile.mkdtemp(prefix="helper-rate-"))
        self._exits.append(lambda: asyncio.to_thread(shutil.rmtree, scratch, True))
        server_context = dev_server()
        server = await server_context.__aenter__()
        self._exits.append(lambda: server_context.__aexit__(None, None, None))
        core_context = serving_fake_core(FakeCore(sessions=DoneAtOnce()))
        core_url = await core_context.__aenter__()
        self._exits.append(lambda: core_context.__aexit__(None, None, None))
        chat_context = running_chat()
        chat_url = await chat_context.__aenter__()
        self._exits.append(lambda: chat_context.__aexit__(None, None, None))
        store_url = None
        if self.postgres:  # a fresh database on that server, dropped at the end
            from tests.helpers import fresh_postgres_database

            database_context = fresh_postgres_database(self.postgres)
            store_url = await database_context.__aenter__()
            self._exits.append(lambda: database_context.__aexit__(None, None, None))
        env = _project_env(server, scratch, core_url, chat_url, self.max_rows, store_url)
        bare_worker = None
        if self.bare:
            bare_command = [sys.executable, "-m", "tools.bench.helper_rate", "--bare-worker", server.address]
            bare_worker = await _spawn(bare_command, dict(os.environ), scratch / "bare.log")
            self._exits.append(lambda: stop_process(bare_worker))
        script = self.worker_script or _root() / "worker.py"
        # PYTHONPATH: a worker script from elsewhere (another revision, for a comparison) imports this checkout.
        env["PYTHONPATH"] = str(_root())
        project_worker = await _spawn([sys.executable, str(script)], env, scratch / "worker.log")
        self._exits.append(lambda: stop_process(project_worker))
        settings = Settings.from_env(env)
        return Stack(
            server=server,
            bare_client=await Client.connect(server.address),
            bare_worker=bare_worker,
            project_client=await connect_for(settings),
            project_worker=project_worker,
            settings=settings,
            run_id=uuid.uuid4().hex[:6],
            logs=scratch,
        )

    async def __aexit__(self, error_type: type[BaseException] | None, *_: object) -> None:
        if error_type is not None:
            self._exits.pop(0)  # keep the logs of a failed run
            print(f"the processes' logs are kept in {self.scratch}", file=sys.stderr, flush=True)
        for exit_ in reversed(self._exits):
            await exit_()


def bare_pid(stack: Stack) -> int:
    assert stack.bare_worker is not None
    return stack.bare_worker.pid


async def bare_phase(stack: Stack, lanes: int, per_lane: int, tag: str) -> int:
    async def one(lane: int, index: int) -> None:
        await stack.bare_client.execute_workflow(
            BareWorkflow.run, "hello", id=f"bare-{stack.run_id}-{tag}-{lane}-{index}", task_queue=BARE_QUEUE
        )

    return await in_lanes(lanes, per_lane, one)


async def project_phase(stack: Stack, lanes: int, per_lane: int, tag: str) -> int:
    """Each lane is one owner admitting helpers one after the other, each waited for until its workflow ends."""

    async def one(lane: int, index: int) -> None:
        owner = f"owner{lane}-{stack.run_id}"
        helper_id = f"{tag}-{index}"
        request = HelperRequest(owner=owner, helper_id=helper_id, task="Look up the answer.", model="scripted")
        await admit(stack.project_client, stack.settings, request, reply_by(stack.settings))
        await stack.project_client.get_workflow_handle(helper_workflow_id(owner, helper_id)).result()

    return await in_lanes(lanes, per_lane, one)


# --- the profile -----------------------------------------------------------------------------------------

# What a sampled frame's file says about where the CPU went; the first part found from the leaf wins.
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("fsync of result files", ("fsync",)),
    ("encryption (codec)", ("codec/encryption", "cryptography/")),
    ("store (SQLAlchemy, aiosqlite)", ("sqlalchemy/", "aiosqlite/", "sqlite3/", "store/helper_store")),
    ("HTTP (httpx)", ("httpx/", "httpcore/", "h11/", "anyio/")),
    ("workflow sandbox", ("workflow_sandbox/",)),
    (
        "data converter, pydantic",
        ("temporalio/converter", "pydantic/", "pydantic_core/", "temporalio/contrib/pydantic"),
    ),
    ("SDK bridge (protobuf, core)", ("temporalio/bridge/", "google/protobuf")),
    ("workflow runtime (SDK)", ("temporalio/worker/_workflow", "temporalio/workflow")),
    ("activity runtime (SDK)", ("temporalio/worker/_activity", "temporalio/activity")),
    ("logging", ("logging/",)),
    ("asyncio loop", ("asyncio/", "selectors")),
]


def _frames(line: str) -> Iterator[str]:
    stack, _, _ = line.rpartition(" ")
    yield from reversed(stack.split(";"))


def profile_parts(raw: Path) -> list[tuple[str, float]]:
    """Shares of the samples by part, from py-spy's raw (collapsed) output."""
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        part = "other"
        for frame in _frames(line):
            found = next((name for name, marks in PARTS if any(mark in frame for mark in marks)), None)
            if found is not None:
                part = found
                break
        totals[part] += int(count)
    whole = sum(totals.values()) or 1
    return [(part, 100 * count / whole) for part, count in totals.most_common()]


async def start_py_spy(pid: int, output: Path) -> asyncio.subprocess.Process:
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    # --gil: only the thread holding the GIL is sampled, so threads waiting (sqlite, the executor) are not counted
    # as if they were working; --nonblocking: the worker is not paused at every sample.
    command = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250", "--nonblocking", "--gil"]
    return await asyncio.create_subprocess_exec(
        *command, "-o", str(output), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )


async def stop_py_spy(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    await asyncio.wait_for(process.wait(), 60)


# --- the run ---------------------------------------------------------------------------------------------


async def main_async(
    helpers: int,
    parallel: int,
    rounds: int,
    py_spy: Path | None,
    worker_script: Path | None,
    postgres: str | None = None,
) -> None:
    per_lane = max(1, helpers // parallel)
    async with run_stack(max_rows=per_lane * rounds + 10, worker_script=worker_script, postgres=postgres) as stack:
        print(f"store: {'PostgreSQL' if postgres else 'SQLite'}", flush=True)
        server_pid = stack.server.pid
        # Warm-up: imports, connections, the first coordinators; one item per lane, not measured.
        await bare_phase(stack, parallel, 1, "warm")
        await project_phase(stack, parallel, 1, "warm")
        bare: list[Phase] = []
        project: list[Phase] = []
        for number in range(rounds):
            tag = f"r{number}"
            bare.append(await measure(bare_pid(stack), server_pid, partial(bare_phase, stack, parallel, per_lane, tag)))
            sampler = None
            if py_spy is not None and number == rounds - 1:
                sampler = await start_py_spy(stack.project_worker.pid, py_spy)
            project.append(
                await measure(
                    stack.project_worker.pid, server_pid, partial(project_phase, stack, parallel, per_lane, tag)
                )
            )
            if sampler is not None:
                await stop_py_spy(sampler)
            print(
                f"round {number + 1}: project {project[-1].rate:.1f}/s {project[-1].worker_ms:.1f} ms worker "
                f"{project[-1].server_ms:.1f} ms server | bare {bare[-1].rate:.1f}/s {bare[-1].worker_ms:.1f} ms "
                f"worker {bare[-1].server_ms:.1f} ms server",
                flush=True,
            )
        report(helpers=per_lane * parallel, parallel=parallel, bare=bare, project=project)
        last = project[-1]
        threads = ", ".join(
            f"{name} {1000 * spent / last.completed:.1f} ms"
            for name, spent in sorted(last.worker_threads_s.items(), key=lambda item: -item[1])
            if spent > 0
        )
        print(f"project worker CPU per helper by thread name (last round): {threads}")
        if py_spy is not None:
            print(f"\nwhere the project worker's sampled Python CPU went ({py_spy}):")
            for part, share in profile_parts(py_spy):
                print(f"  {share:5.1f} %  {part}")


def report(helpers: int, parallel: int, bare: list[Phase], project: list[Phase]) -> None:
    def median_of(phases: list[Phase], value: Callable[[Phase], float]) -> float:
        ordered = sorted(value(phase) for phase in phases)
        return ordered[len(ordered) // 2]

    rate_ratio = median_of(project, lambda p: p.rate) / median_of(bare, lambda p: p.rate)
    cpu_ratio = median_of(project, lambda p: p.worker_ms) / median_of(bare, lambda p: p.worker_ms)
    server_ratio = median_of(project, lambda p: p.server_ms) / median_of(bare, lambda p: p.server_ms)
    print(f"\n{helpers} each, {parallel} in parallel, {len(project)} round(s): median (range)")
    print(
        f"helpers completed per second: project {spread([p.rate for p in project])} /s | "
        f"baseline {spread([p.rate for p in bare])} /s | ratio ×{rate_ratio:.2f}  (target ≥ ×{TARGET_RATE_RATIO})"
    )
    print(
        f"worker CPU per completed helper: project {spread([p.worker_ms for p in project])} ms | "
        f"baseline {spread([p.worker_ms for p in bare])} ms | ratio ×{cpu_ratio:.1f}  "
        f"(target ≤ ×{TARGET_WORKER_CPU_RATIO} of bare)"
    )
    print(
        f"server CPU per completed helper: project {spread([p.server_ms for p in project])} ms | "
        f"baseline {spread([p.server_ms for p in bare])} ms | ratio ×{server_ratio:.1f}  (for information)"
    )
    # This process serves the fake core and the chat too; the machine's cores are shared by all four.
    print(
        f"this process's CPU per completed helper (clients, fake core, chat): project "
        f"{spread([p.driver_ms for p in project])} ms | baseline {spread([p.driver_ms for p in bare])} ms  "
        f"(for information)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.helper_rate")
    parser.add_argument("--helpers", type=int, default=200, help="helpers (and bare workflows) per round")
    parser.add_argument("--parallel", type=int, default=20, help="lanes: owners, each admitting one at a time")
    parser.add_argument("--rounds", type=int, default=1, help="bare then project, this many times")
    parser.add_argument("--py-spy", type=Path, default=None, help="sample the project worker into this raw file")
    parser.add_argument(
        "--worker-script", type=Path, default=None, help="another worker.py to compare (e.g. `git show HEAD:worker.py`)"
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="store on this PostgreSQL server (a fresh database), e.g. postgresql+asyncpg://postgres@127.0.0.1/postgres",
    )
    parser.add_argument("--bare-worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.bare_worker:
        # Imported by name, so the workflow's module is `tools.bench.helper_rate` (the sandbox imports it again).
        from tools.bench import helper_rate

        asyncio.run(helper_rate.serve_bare_worker(arguments.bare_worker))
        os._exit(0)  # sdk-python#300
    asyncio.run(
        main_async(
            arguments.helpers,
            arguments.parallel,
            arguments.rounds,
            arguments.py_spy,
            arguments.worker_script,
            arguments.postgres,
        )
    )
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
