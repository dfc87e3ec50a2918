"""Admission as Iva's importable client sees it, against a bare Temporal update in the same run (R43).

    .venv/bin/python -m tools.bench.admission [--samples 200]

Project: `HelperClient.start` to an owner whose coordinator already runs: the checks, the update to the
coordinator, its validator and handler (the book's decision, the row written, the helper workflow started),
the answer. Baseline: `execute_update` on a trivial workflow whose handler returns at once, on the same dev
server and worker process. Calls are sequential; each admitted helper is closed afterwards (not timed), so
owners never run out of places, and the next call waits until the closed helper has ended.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from domain.limits import Policy
from domain.requests import HelperRequest
from protocol.names import helper_workflow_id
from tools.bench.common import bench_stack, describe

OWNERS = 20


@workflow.defn(sandboxed=False)
class EchoWorkflow:
    """The baseline: an update that returns at once, on a workflow that waits for nothing else."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.update
    async def echo(self, value: str) -> str:
        return value

    @workflow.signal
    def stop(self) -> None:
        self.done = True


async def baseline(client: Client, samples: int) -> list[float]:
    queue = f"bench-echo-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[EchoWorkflow]):
        handle = await client.start_workflow(
            EchoWorkflow.run, id=f"echo-{uuid.uuid4().hex[:6]}", task_queue=queue, run_timeout=timedelta(hours=1)
        )
        await handle.execute_update(EchoWorkflow.echo, "warm")
        latencies = []
        for number in range(samples):
            started = time.perf_counter()
            await handle.execute_update(EchoWorkflow.echo, f"u{number}")
            latencies.append((time.perf_counter() - started) * 1000)
        await handle.signal(EchoWorkflow.stop)
        return latencies


async def measure(samples: int) -> tuple[list[float], list[float]]:
    async with bench_stack(Policy()) as stack:
        client = stack.client
        owners = [f"owner-{n}" for n in range(OWNERS)]
        for owner in owners:  # every coordinator runs before the first timed call
            await client.start(HelperRequest(owner=owner, helper_id="warm", task="Warm up.", model="scripted"))
            await client.close(owner, "warm")
        project = []
        for number in range(samples):
            owner = owners[number % OWNERS]
            request = HelperRequest(owner=owner, helper_id=f"h{number}", task="Admit.", model="scripted")
            started = time.perf_counter()
            await client.start(request)
            project.append((time.perf_counter() - started) * 1000)
            await client.close(owner, request.helper_id)
            # The next call meets an idle worker and server, as Iva's calls usually do.
            with contextlib.suppress(WorkflowFailureError):
                await client.temporal.get_workflow_handle(helper_workflow_id(owner, request.helper_id)).result()
        bare = await baseline(stack.client.temporal, samples)
        return project, bare


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.admission")
    parser.add_argument("--samples", type=int, default=200)
    arguments = parser.parse_args()
    project, bare = asyncio.run(measure(arguments.samples))
    print(describe("HelperClient.start to a running coordinator", project), flush=True)
    print(describe("execute_update on a trivial workflow", bare), flush=True)
    p50, p99 = _percentile(project, 0.5), _percentile(project, 0.99)
    b50, b99 = _percentile(bare, 0.5), _percentile(bare, 0.99)
    print(
        f"admission (HelperClient.start): project p50={p50:.0f} ms p99={p99:.0f} ms | baseline (execute_update) "
        f"p50={b50:.0f} ms p99={b99:.0f} ms | ratio x{p50 / b50:.1f} / x{p99 / b99:.1f}",
        flush=True,
    )
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
