"""Many owners admitting at the same moment through Iva's client, beside a bare update-with-start in the same run.

    .venv/bin/python -m tools.bench.owners [--owners 1000] [--postgres URL]

The production shape (tools.bench.common.process_stack): `python worker.py`, the reference core, the dev
server, the store on a fresh PostgreSQL database. Every owner admits at once (one task each, all started
together), twice:
- first: `HelperClient.start` of each owner's first helper, which starts the owner's coordinator
  (update-with-start);
- again: a second helper of each owner, to its running coordinator.
Each project round is followed by the baseline's: `execute_update_with_start_workflow` on a trivial workflow
per owner (its update returns at once), through the same Temporal client (codec included), served by a default
worker in a process of its own. The helpers' sessions then sit idle (one step, ten minutes away), so the
rounds after the first meet a worker that follows every earlier helper. The model check `HelperClient.start`
makes first (the core's catalog, `starter.client.check_model`) is timed on its own at the same concurrency.

Then every coordinator's history is read: its length and its updates against the coordinator's own
continue-as-new thresholds (workflows/coordinator.py) and the server's limits (10,240 events warned,
2,000 updates per run; 10 updates in flight, which shows as refused admissions).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker

from domain.requests import HelperRequest
from protocol.errors import StarterError
from protocol.names import coordinator_id
from reference.core.script import scripted_task
from starter.client import check_model
from tools.bench.admission import EchoWorkflow
from tools.bench.common import (
    ProcessStack,
    describe,
    machine_busy_seconds,
    process_cpu_seconds,
    process_stack,
    repository_root,
    stop_process,
)
from workflows.coordinator import MAX_EVENTS_PER_RUN, MAX_MESSAGES_PER_RUN

ECHO_QUEUE = "echo"
HISTORY_WARNING_EVENTS = 10_240
UPDATES_PER_RUN = 2_000
READING_LANES = 16
# Every session waits this long for its one step: the helpers stay idle follows while the bench runs.
IDLE_TASK = scripted_task("Wait for the quarterly figures.", steps=1, step_ms=600_000)


@dataclass
class Round:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    cores: dict[str, float] = field(default_factory=dict)  # process -> cores used during the round

    def failed(self, error: BaseException) -> None:
        kind = f"{type(error).__name__}: {str(error)[:120]}"
        self.failures[kind] = self.failures.get(kind, 0) + 1


async def all_at_once(
    name: str, owners: list[str], call: Callable[[str], Awaitable[object]], processes: dict[str, int]
) -> Round:
    """Every owner's call started together; each timed from its own start. The CPU of `processes` (name -> pid)
    and of the whole machine during the round go with it."""
    result = Round(name)
    cpu_before = {process: process_cpu_seconds(pid) for process, pid in processes.items()}
    busy_before, total_before = machine_busy_seconds()
    started_at = time.monotonic()
    gate = asyncio.Event()

    async def one(owner: str) -> None:
        await gate.wait()
        started = time.perf_counter()
        try:
            await call(owner)
        except (StarterError, RPCError, TimeoutError) as error:
            result.failed(error)
            return
        result.latencies_ms.append((time.perf_counter() - started) * 1000)

    tasks = [asyncio.create_task(one(owner)) for owner in owners]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    seconds = time.monotonic() - started_at
    result.cores = {
        process: (process_cpu_seconds(pid) - cpu_before[process]) / seconds for process, pid in processes.items()
    }
    busy, total = machine_busy_seconds()
    result.cores["machine busy (share)"] = (busy - busy_before) / max(total - total_before, 1e-6)
    return result


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def compare(label: str, project: Round, baseline: Round) -> None:
    for side in (project, baseline):
        print(describe(side.name, side.latencies_ms) if side.latencies_ms else f"{side.name}: none answered")
        if side.failures:
            print(f"  {side.name} failed: {side.failures}")
        print("  cores used during the round: " + ", ".join(f"{name} {used:.2f}" for name, used in side.cores.items()))
    p50, p99 = percentile(project.latencies_ms, 0.5), percentile(project.latencies_ms, 0.99)
    b50, b99 = percentile(baseline.latencies_ms, 0.5), percentile(baseline.latencies_ms, 0.99)
    print(
        f"{label}: project p50={p50:.0f} ms p99={p99:.0f} ms ({sum(project.failures.values())} failed) | "
        f"baseline (bare update-with-start) p50={b50:.0f} ms p99={b99:.0f} ms | ratio x{p50 / b50:.1f} / "
        f"x{p99 / b99:.1f}",
        flush=True,
    )


async def coordinator_limits(stack: ProcessStack, owners: list[str]) -> None:
    """Each coordinator's current run: events and updates, beside the thresholds and the server's limits."""
    lanes = asyncio.Semaphore(READING_LANES)
    lengths: list[int] = []
    updates: list[int] = []
    task_failures = 0

    async def one(owner: str) -> None:
        nonlocal task_failures
        async with lanes:
            history = await stack.client.temporal.get_workflow_handle(coordinator_id(owner)).fetch_history()
        lengths.append(len(history.events))
        updates.append(
            sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
        )
        task_failures += sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)

    await asyncio.gather(*(one(owner) for owner in owners))
    over = sum(
        1
        for length, count in zip(lengths, updates, strict=True)
        if length >= MAX_EVENTS_PER_RUN or count >= MAX_MESSAGES_PER_RUN
    )
    print(
        f"coordinators over their limits: project {over} of {len(owners)} | target 0 "
        f"(longest run {max(lengths)} events, continue-as-new at {MAX_EVENTS_PER_RUN:,}, server warns at "
        f"{HISTORY_WARNING_EVENTS:,}; most updates in a run {max(updates)}, continue-as-new at "
        f"{MAX_MESSAGES_PER_RUN}, server limit {UPDATES_PER_RUN:,}; failed workflow tasks {task_failures})",
        flush=True,
    )


async def run(owner_count: int, postgres: str) -> None:
    # Two idle follows per owner hold activity slots; HELPER_MAX_CONCURRENT_FOLLOWS is for a worker whose follows
    # have their own task queue, and a worker without it ignores it.
    env = {
        "HELPER_MAX_CONCURRENT_ACTIVITIES": str(2 * owner_count + 200),
        "HELPER_MAX_CONCURRENT_FOLLOWS": str(2 * owner_count + 100),
    }
    tag = uuid.uuid4().hex[:6]
    owners = [f"owner-{tag}-{number}" for number in range(owner_count)]
    async with process_stack(postgres, env) as stack:
        echo = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.bench.owners",
            "--echo-worker",
            env=stack.environment,
            cwd=repository_root(),
        )
        try:
            temporal = stack.client.temporal

            def admit(helper_id: str) -> Callable[[str], Awaitable[object]]:
                return lambda owner: stack.client.start(
                    HelperRequest(owner=owner, helper_id=helper_id, task=IDLE_TASK, model="scripted")
                )

            async def bare(owner: str) -> object:
                start = WithStartWorkflowOperation(
                    EchoWorkflow.run,
                    id=f"echo/{owner}",
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    task_queue=ECHO_QUEUE,
                )
                return await temporal.execute_update_with_start_workflow(
                    EchoWorkflow.echo, owner, start_workflow_operation=start
                )

            # One of each first, unmeasured: the worker's and the server's first-use costs are not an owner's.
            await admit("warm")(f"warm-{tag}")
            await bare(f"warm-{tag}")
            print(f"{owner_count} owners, each admitting at the same moment", flush=True)
            ours = {
                "worker": stack.worker.pid,
                "server": stack.server.pid,
                "reference core": stack.core.pid,
                "this process": os.getpid(),
            }
            theirs = {"echo worker": echo.pid, "server": stack.server.pid, "this process": os.getpid()}
            first = await all_at_once("HelperClient.start, first helper (coordinator starts)", owners, admit("1"), ours)
            first_bare = await all_at_once("update-with-start, workflow starts", owners, bare, theirs)
            again = await all_at_once("HelperClient.start, second helper (coordinator runs)", owners, admit("2"), ours)
            again_bare = await all_at_once("update-with-start, workflow runs", owners, bare, theirs)
            checks = await all_at_once(
                "model check alone (starter.client.check_model)",
                owners,
                lambda owner: check_model(stack.settings, "scripted"),
                {"reference core": stack.core.pid, "this process": os.getpid()},
            )
            compare(f"admission of {owner_count} owners at once, first", first, first_bare)
            compare(f"admission of {owner_count} owners at once, again", again, again_bare)
            print(describe(checks.name, checks.latencies_ms), flush=True)
            await coordinator_limits(stack, owners)
        finally:
            await stop_process(echo)


async def serve_echo_worker() -> None:
    """The baseline's worker process: a default Worker with the stack's connection settings, until SIGTERM."""
    from config.settings import Settings
    from protocol.connection import connect_for

    client = await connect_for(Settings.from_env())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(client, task_queue=ECHO_QUEUE, workflows=[EchoWorkflow]):
        await stop.wait()


def main() -> None:
    from tools.bench.__main__ import POSTGRES_URL

    parser = argparse.ArgumentParser(prog="python -m tools.bench.owners", description=__doc__)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--postgres", default=POSTGRES_URL, metavar="URL", help="a PostgreSQL server (fresh database)")
    parser.add_argument("--echo-worker", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.echo_worker:
        asyncio.run(serve_echo_worker())
    else:
        asyncio.run(run(arguments.owners, arguments.postgres))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
