"""Many new owners starting a helper at the same moment through the starter API, beside raw update-with-start.

    .venv/bin/python -m tools.bench.burst [--owners 1000] [--postgres URL]

The production shape (tools.bench.common.process_stack): `python worker.py`, the reference core, the dev server
in memory, the store on a fresh PostgreSQL database, and the starter API (`helper-starter serve`) as its own
process. Four rounds, each with owners that have never started a helper:

- project, all at once: every owner's `POST /v1/owners/{owner}/helpers` sent together over HTTP (one connection
  each), as a client that did not come with the project would send it; it honours the answers as documented:
  201/200 done, 202 accepted (the admission is durable: done for this caller), 429 `busy` and 503 `unavailable`
  (nothing taken) asked again after `Retry-After` seconds;
- raw, all at once: `execute_update_with_start_workflow` of a trivial workflow per owner (its update returns at
  once) from a plain Temporal client, served by a default worker in a process of its own;
- the same two with at most 100 callers at a time.

And a third side, the floor of the project's shape: the same owners through bare SDK calls that do what an
admission must (an update-with-start whose handler runs an activity that starts a second workflow, which runs a
local activity, starts a timer and an activity on another task queue, and waits), with no project code, so the
server CPU an admission cannot go below is measured in the same run.

For each: the first answer's kind and its time (p50, p99, the slowest: the bound a caller can rely on), the time
until every owner's helper was taken, admissions per second, and the Temporal server's CPU per admission, read
from /proc from the round's first call until the server is idle again, so the work an admission leaves behind
(the helper's start, its first task, its follow) is counted. The helpers' sessions then sit idle (one step, ten
minutes away). Then the answers are checked against the store: every owner answered done or accepted has its
row; no owner was answered `unavailable` or `busy` for work that was taken (a refused request writes nothing, so
its row exists only if a later try took it).

Then where an admission waits, from the histories of a sample of each round's owners, the project's beside the
floor's: each of the coordinator's first workflow tasks and its first activity, waiting to be dispatched and running;
the helper's start to its first task, that task running, its first activity; and the events an admission writes.
And every coordinator's history is read: its length and its updates against the coordinator's own continue-as-new
thresholds (workflows/coordinator.py) and the server's limits.

`--one-round` runs only the all-at-once round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import ssl
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WithStartWorkflowOperation, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from config.settings import Settings
from protocol.names import coordinator_id, helper_workflow_id
from reference.core.script import scripted_task
from tools.bench.admission import EchoWorkflow
from tools.bench.api import serving
from tools.bench.common import (
    MAIN_THREAD,
    DevServer,
    ProcessStack,
    machine_busy_seconds,
    metric,
    process_cpu_seconds,
    process_stack,
    repository_root,
    scrape_metrics,
    settled_cpu,
    stop_process,
    thread_cpu_seconds,
)
from workflows.coordinator import MAX_EVENTS_PER_RUN, MAX_MESSAGES_PER_RUN

ECHO_QUEUE = "echo"
# The floor's workflows run unsandboxed (this module imports httpx): the floor is about the server's work.
FLOOR_QUEUE = "floor"
FLOOR_FOLLOWS = "floor-follows"
HISTORY_WARNING_EVENTS = 10_240
UPDATES_PER_RUN = 2_000
READING_LANES = 16
# Every session waits this long for its one step: the helpers stay idle follows while the bench runs.
IDLE_TASK = scripted_task("Wait for the quarterly figures.", steps=1, step_ms=600_000)
# A caller that was refused asks again after Retry-After, spread by up to this share, as a careful client does.
RETRY_SPREAD = 0.2
# A caller gives up after this long (the bench reports it): far beyond any bound the runtime states.
CALLER_GIVES_UP_S = 300.0
# The server's own pace before a round (the earlier rounds' helpers heartbeat and follow) is measured this long and
# taken out of the round's CPU.
BACKGROUND_S = 5.0


@activity.defn(name="start_bare_helper")
async def start_bare_helper(owner: str) -> None:
    await activity.client().start_workflow(BareHelper.run, id=f"bare-helper/{owner}", task_queue=FLOOR_QUEUE)


@activity.defn(name="bare_open")
async def bare_open(owner: str) -> str:
    return owner


@activity.defn(name="bare_follow")
async def bare_follow(owner: str) -> None:
    await asyncio.Event().wait()  # held until the worker stops, as a follow is held for a helper's run


@workflow.defn(name="BareCoordinator")
class BareCoordinator:
    """The floor's coordinator: an admission is one activity that starts the helper."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update
    async def admit(self, owner: str) -> str:
        await workflow.execute_activity(start_bare_helper, owner, start_to_close_timeout=timedelta(seconds=30))
        return owner


@workflow.defn(name="BareHelper")
class BareHelper:
    """The floor's helper: its open as a local activity, its deadline's timer, its follow on a queue of its own."""

    @workflow.run
    async def run(self) -> None:
        owner = workflow.info().workflow_id
        await workflow.execute_local_activity(bare_open, owner, start_to_close_timeout=timedelta(seconds=10))
        deadline = asyncio.ensure_future(workflow.sleep(timedelta(minutes=45)))
        follow = asyncio.ensure_future(
            workflow.execute_activity(
                bare_follow, owner, task_queue=FLOOR_FOLLOWS, start_to_close_timeout=timedelta(hours=1)
            )
        )
        await asyncio.wait([deadline, follow], return_when=asyncio.FIRST_COMPLETED)


@dataclass
class Round:
    name: str
    first_ms: list[float] = field(default_factory=list)  # each owner's first answer
    taken_ms: list[float] = field(default_factory=list)  # each owner's time until its helper was taken
    first_kinds: Counter[str] = field(default_factory=Counter)  # the first answers' kinds
    kinds: Counter[str] = field(default_factory=Counter)  # every answer's kind, retries included
    retry_after_s: list[int] = field(default_factory=list)
    outcome: dict[str, str] = field(default_factory=dict)  # owner -> what it was last told
    # Owners told busy or unavailable (nothing taken) whose next try found their helper already admitted (200).
    untrue: set[str] = field(default_factory=set)
    seconds: float = 0.0  # until every owner's helper was taken
    server_cpu_s: float = 0.0  # the server's CPU from the first call until it was idle again, less its background
    cpu_s: dict[str, float] = field(default_factory=dict)  # the same for the round's other processes
    busy_share: float = 0.0  # the machine's CPU busy while the callers waited (all cores)
    callers_lag_s: float = 0.0  # the callers' own event loop's longest lateness: a late caller sends late
    worker_threads_s: dict[str, float] = field(default_factory=dict)  # the project worker's CPU by thread
    # The server's own counts over the same span: requests by service and operation, its store's by operation.
    server_requests: dict[str, float] = field(default_factory=dict)
    server_store: dict[str, float] = field(default_factory=dict)

    @property
    def taken(self) -> int:
        return sum(1 for kind in self.outcome.values() if kind in ("done", "accepted"))


def kind_of(status: int) -> str:
    return {200: "done", 201: "done", 202: "accepted", 429: "busy", 503: "unavailable"}.get(status, f"http {status}")


# What a call answers: the HTTP status (201 new, 200 existing, ...) and its Retry-After, if any.
Answer = tuple[int, int | None]


async def run_round(
    name: str,
    owners: list[str],
    call: Callable[[str], Awaitable[Answer]],
    at_once: int,
    server: DevServer,
    processes: dict[str, int],
    threads_of: int | None = None,
) -> Round:
    """Every owner's call, `at_once` at a time (all of them: together), each owner asking again after a refusal;
    `threads_of`: a process whose CPU is also split by thread (the project's worker)."""
    result = Round(name)
    lanes = asyncio.Semaphore(at_once)
    pids = {"server": server.pid, **processes}
    await settled_cpu(list(pids.values()), quiet_s=1.0, most_s=60)
    idle_before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    server_idle = await scrape_metrics(server.metrics_url)
    await asyncio.sleep(BACKGROUND_S)
    before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    background = {name: (before[name] - idle_before[name]) / BACKGROUND_S for name in pids}
    began_at = time.monotonic()
    gate = asyncio.Event()
    started_at = time.perf_counter()
    busy_before, total_before = machine_busy_seconds()
    threads_before = thread_cpu_seconds(threads_of) if threads_of else {}
    server_before = await scrape_metrics(server.metrics_url)

    async def one(owner: str) -> None:
        await gate.wait()
        async with lanes:
            began = time.perf_counter()
            first = True
            refused_before = False
            while time.perf_counter() - began < CALLER_GIVES_UP_S:
                sent = time.perf_counter()
                try:
                    status, retry_after = await call(owner)
                    kind = kind_of(status)
                except (httpx.HTTPError, OSError) as error:
                    status, kind, retry_after = 0, f"transport {type(error).__name__}", 1
                if refused_before and status == 200:
                    result.untrue.add(owner)
                if first:
                    result.first_ms.append((time.perf_counter() - sent) * 1000)
                    result.first_kinds[kind] += 1
                    first = False
                result.kinds[kind] += 1
                result.outcome[owner] = kind
                if kind in ("done", "accepted"):
                    result.taken_ms.append((time.perf_counter() - began) * 1000)
                    return
                refused_before = refused_before or kind in ("busy", "unavailable")
                if not kind.startswith(("busy", "unavailable", "transport", "http 408")):
                    return  # refused or invalid: asking again would not help
                wait = retry_after or 1
                result.retry_after_s.append(wait)
                await asyncio.sleep(wait * (1 + random.uniform(0, RETRY_SPREAD)))

    tasks = [asyncio.create_task(one(owner)) for owner in owners]
    lag = asyncio.create_task(loop_lag(result))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    lag.cancel()
    result.seconds = time.perf_counter() - started_at
    busy_after, total_after = machine_busy_seconds()
    result.busy_share = (busy_after - busy_before) / max(total_after - total_before, 1e-9)
    await back_to_background(pids, background)
    server_after = await scrape_metrics(server.metrics_url)
    # Less the background's pace (the earlier rounds' helpers heartbeat), as for the CPU.
    share = (time.monotonic() - began_at) / BACKGROUND_S
    for name, labels, into in (
        ("service_requests", ("service_name", "operation"), result.server_requests),
        ("persistence_requests", ("operation",), result.server_store),
    ):
        idle = counts_by(server_idle, server_before, name, labels)
        grown = counts_by(server_before, server_after, name, labels)
        into.update({key: kept for key, n in grown.items() if (kept := n - idle.get(key, 0.0) * share) > 0})
    if threads_of:
        after = thread_cpu_seconds(threads_of)
        result.worker_threads_s = {name: after[name] - threads_before.get(name, 0.0) for name in after}
    elapsed = time.monotonic() - began_at
    used = {name: process_cpu_seconds(pid) - before[name] - background[name] * elapsed for name, pid in pids.items()}
    result.server_cpu_s = used.pop("server")
    result.cpu_s = used
    return result


async def loop_lag(result: Round, every_s: float = 0.05) -> None:
    """The longest time the callers' event loop was late to wake a sleeper: their requests go out that late."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every_s
        await asyncio.sleep(every_s)
        result.callers_lag_s = max(result.callers_lag_s, loop.time() - due)


async def back_to_background(pids: dict[str, int], background: dict[str, float], most_s: float = 60) -> None:
    """Wait until every process is back to its background pace (within 5 % of a core over a second): the work an
    admission leaves behind (the helper's start, its first task, its follow) belongs to the round."""
    deadline = time.monotonic() + most_s
    while time.monotonic() < deadline:
        before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        await asyncio.sleep(1.0)
        if all(process_cpu_seconds(pid) - before[name] <= background[name] + 0.05 for name, pid in pids.items()):
            return


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def counts_by(before: dict[str, float], after: dict[str, float], name: str, labels: Sequence[str]) -> dict[str, float]:
    """A counter's growth between two scrapes, summed by the values of `labels` (joined with '/')."""
    grown: dict[str, float] = {}
    for key, value in after.items():
        if not key.startswith(name + "{"):
            continue
        found = dict(part.split("=", 1) for part in key[len(name) + 1 : -1].split(",") if "=" in part)
        group = "/".join(found.get(label, "?").strip('"') for label in labels)
        grown[group] = grown.get(group, 0.0) + value - before.get(key, 0.0)
    return {key: value for key, value in grown.items() if value > 0}


def report_server_work(side: Round, most: int = 40) -> None:
    """The server's requests and store operations per admission, the most frequent first."""
    taken = max(side.taken, 1)
    for what, counts in (("requests", side.server_requests), ("store operations", side.server_store)):
        if counts:
            top = [item for item in sorted(counts.items(), key=lambda item: -item[1])[:most] if item[1] / taken >= 0.05]
            total = sum(counts.values()) / taken
            listed = ", ".join(f"{key} {value / taken:.2f}" for key, value in top)
            print(f"  the server's {what} per admission: {total:.1f} in all; {listed}", flush=True)
    # The background's pace is taken out, but the earlier rounds' helpers heartbeat in bursts (they started in one):
    # heartbeats in a round that sends none are theirs.


def report(side: Round, owners: int) -> None:
    first = side.first_ms
    print(
        f"{side.name}: first answer p50={percentile(first, 0.5):.0f} ms p99={percentile(first, 0.99):.0f} ms "
        f"slowest={max(first, default=float('nan')):.0f} ms; first answers {dict(side.first_kinds)}; "
        f"all answers {dict(side.kinds)}",
        flush=True,
    )
    if side.retry_after_s:
        print(
            f"  Retry-After given: min {min(side.retry_after_s)} s, median {percentile(side.retry_after_s, 0.5):.0f} s,"
            f" max {max(side.retry_after_s)} s ({len(side.retry_after_s)} in all)"
        )
    cut = sum(n for kind, n in side.kinds.items() if kind.startswith(("transport", "http 408")))
    print(f"  answered 408 or cut mid-request: {cut} of {sum(side.kinds.values())} requests (target 0)", flush=True)
    rate = side.taken / side.seconds if side.seconds else float("nan")
    print(
        f"  {side.taken} of {owners} taken in {side.seconds:.1f} s ({rate:.1f} a second; each owner's time to taken "
        f"p50={percentile(side.taken_ms, 0.5) / 1000:.1f} s p99={percentile(side.taken_ms, 0.99) / 1000:.1f} s); "
        f"server CPU {side.server_cpu_s * 1000 / max(side.taken, 1):.1f} ms per admission; "
        + ", ".join(f"{name} {seconds * 1000 / max(side.taken, 1):.1f} ms" for name, seconds in side.cpu_s.items())
        + f"; the machine {side.busy_share:.0%} busy while callers waited; the callers' loop late by at most "
        f"{side.callers_lag_s * 1000:.0f} ms",
        flush=True,
    )
    if side.worker_threads_s:
        taken = max(side.taken, 1)
        split = ", ".join(
            f"{THREAD_ROLES.get(name, name)} {seconds * 1000 / taken:.1f} ms"
            for name, seconds in sorted(side.worker_threads_s.items(), key=lambda item: -item[1])
            if seconds * 1000 / taken >= 0.05
        )
        print(f"  the worker's CPU per admission by thread (round and its aftermath, background in): {split}")
    report_server_work(side)


# What each of the worker's threads runs.
THREAD_ROLES = {
    MAIN_THREAD: "event loop (activities, HTTP, store, the SDK's Python side)",
    "python": "workflow tasks (the sandbox and the workflows)",
    "tokio-rt-worker": "SDK core (Rust: gRPC, history)",
}


# The service's histograms of a write's wait for its place in the gate and its time in Temporal (starter.backpressure).
# (the histogram, the label values its series must carry)
SERVICE_WRITE_HOPS = {
    "every start, refused too: read until answered": (
        "helper_api_request_seconds",
        ('route="/v1/owners/{owner}/helpers"', 'method="POST"'),
    ),
    "each start that went through: waited for its place in the gate": ("helper_api_write_wait_seconds", ()),
    "each start that went through: sent to Temporal until answered": ("helper_api_write_send_seconds", ()),
}


def buckets_of(page: dict[str, float], name: str, labels: Sequence[str] = ()) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets from a scraped page, as (upper bound, count), in order; only the series
    whose labels hold every one of `labels`."""
    found = []
    for key, value in page.items():
        if key.startswith(f"{name}_bucket{{") and 'le="' in key and all(label in key for label in labels):
            bound = key.split('le="', 1)[1].split('"', 1)[0]
            found.append((float("inf") if bound == "+Inf" else float(bound), value))
    return sorted(found)


def bucket_quantile(buckets: list[tuple[float, float]], fraction: float) -> float:
    """A quantile from cumulative buckets, by linear interpolation inside its bucket (as Prometheus does)."""
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return float("nan")
    rank, lower, below = fraction * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


def report_service_hops(label: str, before: dict[str, float], after: dict[str, float]) -> None:
    """Where the round's writes that went through spent their time in the service, from its /metrics."""
    print(f"{label}: in the starter API (p50 / p90 / p99 ms, bucketed)", flush=True)
    for hop, (name, labels) in SERVICE_WRITE_HOPS.items():
        earlier = dict(buckets_of(before, name, labels))
        buckets = [(bound, count - earlier.get(bound, 0.0)) for bound, count in buckets_of(after, name, labels)]
        quantiles = " / ".join(f"{bucket_quantile(buckets, q) * 1000:.0f}" for q in (0.5, 0.9, 0.99))
        print(f"  {hop}: {quantiles} ({buckets[-1][1] if buckets else 0:.0f} requests)", flush=True)


# The SDK's worker metrics (HELPER_METRICS_BIND) that say whether a round's workflows stayed in the worker's cache:
# a run evicted before its next task replays its whole history on a fresh sandboxed instance.
WORKER_CACHE_COUNTERS = {
    "workflow tasks": "temporal_workflow_task_execution_latency_count",
    "of them replayed": "temporal_workflow_task_replay_latency_count",
    "cache hits": "temporal_sticky_cache_hit",
    "cache misses": "temporal_sticky_cache_miss",
    "forced evictions": "temporal_sticky_cache_total_forced_eviction",
}


def report_worker_cache(label: str, before: dict[str, float], after: dict[str, float]) -> None:
    """The round's workflow tasks and how its workflows fared in the worker's cache, from the SDK's metrics."""
    counts = ", ".join(
        f"{what} {(metric(after, name) or 0.0) - (metric(before, name) or 0.0):.0f}"
        for what, name in WORKER_CACHE_COUNTERS.items()
    )
    print(f"{label}: in the worker: {counts}", flush=True)


def compare(label: str, project: Round, baseline: Round) -> None:
    rate = project.taken / project.seconds
    base_rate = baseline.taken / baseline.seconds
    cpu = project.server_cpu_s / max(project.taken, 1)
    base_cpu = baseline.server_cpu_s / max(baseline.taken, 1)
    print(
        f"{label}: project {rate:.1f} admissions/s, server CPU {cpu * 1000:.1f} ms each, slowest first answer "
        f"{max(project.first_ms) / 1000:.1f} s | baseline (raw update-with-start) {base_rate:.1f}/s, "
        f"{base_cpu * 1000:.1f} ms each, slowest {max(baseline.first_ms) / 1000:.1f} s | ratio throughput "
        f"x{rate / base_rate:.2f} (target >= x0.5), server CPU x{cpu / base_cpu:.2f} (target <= x1.5)",
        flush=True,
    )


async def check_truth(stack: ProcessStack, side: Round) -> None:
    """Every owner told done or accepted has its row; none told busy or unavailable had its work taken: an owner
    that was not answered done in the end has no row, and none found its helper admitted when it asked again."""
    missing = []
    taken_anyway = set(side.untrue)
    for owner, kind in side.outcome.items():
        rows = await stack.store.reads.views(owner)
        if kind in ("done", "accepted") and not rows:
            missing.append(owner)
        if kind not in ("done", "accepted") and rows:
            taken_anyway.add(owner)
    print(
        f"  truth: {len(missing)} told done or accepted without a row; {len(taken_anyway)} told busy or "
        f"unavailable whose work was taken (target 0 and 0)",
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
            try:
                history = await stack.client.temporal.get_workflow_handle(coordinator_id(owner)).fetch_history()
            except RPCError:
                return  # an owner whose every try was refused before anything was sent has no coordinator
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
        f"coordinators over their limits: {over} of {len(owners)} (longest run {max(lengths, default=0)} events, "
        f"continue-as-new at {MAX_EVENTS_PER_RUN:,}, server warns at {HISTORY_WARNING_EVENTS:,}; most updates in a "
        f"run {max(updates, default=0)}, continue-as-new at {MAX_MESSAGES_PER_RUN}, server limit {UPDATES_PER_RUN:,}; "
        f"failed workflow tasks {task_failures})",
        flush=True,
    )


# How many of a round's owners the hop breakdown reads (two histories each).
HOP_SAMPLE = 200
_WAITS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED: ("task", "scheduled"),
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: ("task", "started"),
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: ("task", "completed"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: ("activity", "scheduled"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: ("activity", "started"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("activity", "completed"),
}


STEPS = ("scheduled", "started", "completed")


def _at(event: Any) -> float:
    return float(event.event_time.ToMicroseconds()) / 1e6


def hops_of(events: Sequence[Any], who: str, tasks: int) -> dict[str, float]:
    """Seconds spent in each hop of a history's first `tasks` workflow tasks and its first activity: waiting to be
    dispatched (scheduled -> started) and running (started -> completed); and from the start to the first task."""
    seen: dict[tuple[str, int, str], float] = {}
    counts: Counter[tuple[str, str]] = Counter()
    for event in events:
        kind = _WAITS.get(event.event_type)
        if kind is None:
            continue
        counts[kind] += 1
        seen.setdefault((kind[0], counts[kind], kind[1]), _at(event))
    hops: dict[str, float] = {}
    for what, number in [("task", n) for n in range(1, tasks + 1)] + [("activity", 1)]:
        scheduled, started, completed = (
            seen.get((what, number, step)) for step in ("scheduled", "started", "completed")
        )
        name = f"{who}'s {what} {number}" if what == "task" else f"{who}'s first activity"
        if scheduled is not None and started is not None:
            hops[f"{name}: dispatch"] = started - scheduled
        if started is not None and completed is not None:
            hops[f"{name}: run"] = completed - started
    first = seen.get(("task", 1, "started"))
    if events and first is not None:
        hops[f"{who}'s start -> its first task started"] = first - _at(events[0])
    return hops


async def hops(temporal: Any, label: str, pairs: list[tuple[str, str]]) -> None:
    """Where an admission waits, from the histories of (coordinator id, helper id) pairs, and the events it writes."""
    lanes = asyncio.Semaphore(READING_LANES)
    waits: dict[str, list[float]] = {}
    events: Counter[str] = Counter()
    read = 0

    async def one(coordinator: str, helper: str) -> None:
        nonlocal read
        async with lanes:
            try:
                theirs = [e async for e in temporal.get_workflow_handle(coordinator).fetch_history_events()]
                its = [e async for e in temporal.get_workflow_handle(helper).fetch_history_events()]
            except RPCError:
                return
        read += 1
        for event in (*theirs, *its):
            events[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()] += 1
        for hop, seconds in {**hops_of(theirs, "coordinator", 2), **hops_of(its, "helper", 1)}.items():
            waits.setdefault(hop, []).append(seconds * 1000)

    await asyncio.gather(*(one(coordinator, helper) for coordinator, helper in pairs))
    print(f"{label}: where an admission waits ({read} sampled; p50 / p90 / p99 ms)", flush=True)
    for hop, values in sorted(waits.items()):
        quantiles = " / ".join(f"{percentile(values, q):.0f}" for q in (0.5, 0.9, 0.99))
        print(f"  {hop}: {quantiles}", flush=True)
    written = ", ".join(f"{name} {n / max(read, 1):.1f}" for name, n in events.most_common())
    print(f"  events per admission (coordinator and helper): {written}", flush=True)


async def run(owner_count: int, postgres: str, one_round: bool = False) -> None:
    follows = 2 * owner_count + 100  # two rounds of helpers stay running
    default_follows = Settings.model_fields["max_concurrent_follows"].default
    env = {"HELPER_MAX_CONCURRENT_FOLLOWS": str(follows)} if follows > default_follows else {}
    tag = uuid.uuid4().hex[:6]
    async with process_stack(postgres, env) as stack:
        echo = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tools.bench.burst", "--echo-worker", env=stack.environment, cwd=repository_root()
        )
        # Each caller its own client and connection, as callers of their own are: one client shared by a thousand
        # calls at once would measure its own connection pool.
        callers: dict[str, httpx.AsyncClient] = {}
        try:
            async with serving(stack.environment) as served:
                api, api_pid = served.url, served.pid
                temporal = stack.client.temporal

                # One TLS context for every caller: httpx builds one per client otherwise, some 17 ms of CPU each,
                # which at a burst's start held the callers' own loop for seconds (the API is plain HTTP here).
                tls = ssl.create_default_context()

                async def project(owner: str) -> Answer:
                    body = {"helper_id": "first", "task": IDLE_TASK, "model": "scripted"}
                    if (http := callers.get(owner)) is None:
                        http = callers[owner] = httpx.AsyncClient(timeout=60, trust_env=False, verify=tls)
                    response = await http.post(f"{api}/v1/owners/{owner}/helpers", json=body)
                    retry_after = response.headers.get("retry-after")
                    return response.status_code, int(retry_after) if retry_after else None

                def update_with_start(
                    run: Any, update: Any, kind: str, queue: str
                ) -> Callable[[str], Awaitable[Answer]]:
                    async def call(owner: str) -> Answer:
                        start = WithStartWorkflowOperation(
                            run,
                            id=f"{kind}/{owner}",
                            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                            task_queue=queue,
                        )
                        # A bare caller asks again, under the same update id, when its call's bound passes first
                        # (a loaded server): as a starter caller would after `unavailable`.
                        try:
                            await temporal.execute_update_with_start_workflow(
                                update, owner, id=f"admit-{owner}", start_workflow_operation=start
                            )
                        except WorkflowUpdateRPCTimeoutOrCancelledError:
                            return 503, 1
                        return 201, None

                    return call

                raw = update_with_start(EchoWorkflow.run, EchoWorkflow.echo, "echo", ECHO_QUEUE)
                floor = update_with_start(BareCoordinator.run, BareCoordinator.admit, "bare-coordinator", FLOOR_QUEUE)

                # One of each first, unmeasured: the worker's and the server's first-use costs are not an owner's.
                await project(f"warm-{tag}")
                await raw(f"warm-{tag}")
                await floor(f"warm-{tag}")
                ours = {
                    "worker": stack.worker.pid,
                    "starter API": api_pid,
                    "reference core": stack.core.pid,
                    "callers (this process)": os.getpid(),
                }
                theirs = {"echo worker": echo.pid, "this process": os.getpid()}
                server = stack.server
                rounds = []
                plans = ((owner_count, "all at once"), (100, "100 at a time"))
                for at_once, label in plans[:1] if one_round else plans:
                    owners = [f"o-{tag}-{label[:3]}-{n}" for n in range(owner_count)]
                    name = f"{owner_count} new owners, {label}"
                    print(f"== {name}", flush=True)
                    service_before = await scrape_metrics(f"{api}/metrics")
                    worker_before = await scrape_metrics(stack.metrics_url)
                    ours_round = await run_round(
                        f"starter API, {label}", owners, project, at_once, server, ours, threads_of=stack.worker.pid
                    )
                    report(ours_round, owner_count)
                    report_service_hops(f"starter API, {label}", service_before, await scrape_metrics(f"{api}/metrics"))
                    report_worker_cache(f"starter API, {label}", worker_before, await scrape_metrics(stack.metrics_url))
                    await check_truth(stack, ours_round)
                    theirs_round = await run_round(
                        f"raw update-with-start, {label}", owners, raw, at_once, server, theirs
                    )
                    report(theirs_round, owner_count)
                    floor_name = f"the floor of an admission's shape (bare SDK calls), {label}"
                    floor_round = await run_round(
                        floor_name, owners, floor, at_once, server, theirs, threads_of=echo.pid
                    )
                    report(floor_round, owner_count)
                    compare(name, ours_round, theirs_round)
                    compare(f"{name}, the floor of its shape", floor_round, theirs_round)
                    sample = owners[:HOP_SAMPLE]
                    project_pairs = [(coordinator_id(o), helper_workflow_id(o, "first")) for o in sample]
                    await hops(temporal, f"{name}, the project", project_pairs)
                    floor_pairs = [(f"bare-coordinator/{o}", f"bare-helper/{o}") for o in sample]
                    await hops(temporal, f"{name}, the floor", floor_pairs)
                    rounds.append(owners)
                await coordinator_limits(stack, [owner for owners in rounds for owner in owners])
        finally:
            await asyncio.gather(*(http.aclose() for http in callers.values()))
            await stop_process(echo)


async def serve_echo_worker() -> None:
    """The baseline's worker process: a default Worker with the stack's connection settings, until SIGTERM."""
    from config.settings import Settings
    from protocol.connection import connect_for

    client = await connect_for(Settings.from_env())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with (
        Worker(client, task_queue=ECHO_QUEUE, workflows=[EchoWorkflow]),
        Worker(
            client,
            task_queue=FLOOR_QUEUE,
            workflows=[BareCoordinator, BareHelper],
            activities=[start_bare_helper, bare_open],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
        Worker(client, task_queue=FLOOR_FOLLOWS, activities=[bare_follow], max_concurrent_activities=10_000),
    ):
        await stop.wait()


def main() -> None:
    from tools.bench.__main__ import POSTGRES_URL

    parser = argparse.ArgumentParser(prog="python -m tools.bench.burst", description=__doc__)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--postgres", default=POSTGRES_URL, metavar="URL", help="a PostgreSQL server (fresh database)")
    parser.add_argument("--one-round", action="store_true", help="only the all-at-once round")
    parser.add_argument("--echo-worker", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.echo_worker:
        asyncio.run(serve_echo_worker())
    else:
        asyncio.run(run(arguments.owners, arguments.postgres, arguments.one_round))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
