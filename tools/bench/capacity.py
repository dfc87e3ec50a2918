"""How many running helpers ONE worker replica holds, and what each costs (R46).

    .venv/bin/python -m tools.bench.capacity [--sizes 250,500,1000,2000] [--window-s 180] [--settle-s 30]
        [--step-s 20,60] [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]

Production's shape, each part its own process (tools.bench.common.process_stack): `python worker.py` with its
environment, the reference core, the Temporal dev server, and the store on a fresh PostgreSQL database. Every
helper's task is a script whose steps come every `--step-s` seconds (a random pace per helper), with enough
steps to keep it running to the end of the bench, so each is an idle follow: a long poll to the core and a
row write per step. Helpers spread over owners, three running per owner (the product's limit).

For each size N, in turn on the same stack: admit helpers until N run, let them settle `--settle-s`, then
measure over `--window-s`:
- running helpers held (rows `running` in the store, at the end of the window);
- worker RSS per running helper, over its idle RSS before the first helper;
- worker, server and core CPU per running helper-minute (/proc; the worker's Python thread apart, which runs
  its event loop);
- follow attempts timed out (every helper's pending follow, after the window: a follow sends no heartbeat, so an
  attempt times out only when it outlives its start-to-close timeout);
- observation under load: this process follows a few sessions by long poll too and times each step from the
  core's answer to the row showing it; and the worker's progress writes, from asking for a pooled connection to
  the write's answer;
- store writes per helper-minute: `xact_commit` of the bench database (pg_stat_database), less this process's
  own reads, and rows written;
- the worker's limits and where it stands against each (activity slots and sticky cache from the SDK's metrics,
  file descriptors, the HTTP pool), and the first one a size hits.
The helpers run on, untouched, while the next size is admitted; the run ends by dropping everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import text
from temporalio.service import RPCError
from temporalio.worker import Worker

from config.settings import Settings
from domain.requests import HelperRequest
from protocol.errors import Accepted, Busy, HelperRefused, Unavailable
from protocol.names import FOLLOW_SESSION, helper_workflow_id
from reference.core.script import scripted_task
from store.database import STORE_POOL_SIZE
from tools.bench.common import (
    MAIN_THREAD,
    ProcessStack,
    machine_busy_seconds,
    metric,
    open_files,
    process_cpu_seconds,
    process_rss_bytes,
    process_stack,
    scrape_metrics,
    thread_cpu_seconds,
)
from worker import CACHED_WORKFLOWS, GRACEFUL_SHUTDOWN

TARGET_HELPERS = 2_000
# ≤ 0.2 core for all the idle follows of 2,000 helpers: 6 ms of CPU per helper-minute.
TARGET_WORKER_CORES_AT_TARGET = 0.2
TARGET_OBSERVATION_P99_MS = 200  # R44's bound, at capacity too (R48)
PAUSE_TARGET_S = 0.1  # no event-loop pause longer than this
FREE_FOLLOW_SLOTS = 0.2  # the share of follow slots a replica at its capacity keeps free
RUNNING_PER_OWNER = 3
# The core's step ceiling is 80 calls; the scripts stay below it, so no helper ends while measured.
MOST_STEPS = 79
ADMITTING_LANES = 16
ACTIVITY_WORKER = 'worker_type="ActivityWorker"'  # not the LocalActivityWorker's series
SLOTS_EVERY_S = 5.0  # how often the worker's free slots are read
DESCRIBING_LANES = 8
# Evidence thresholds for "this part is the bottleneck".
SATURATED_CORE = 0.85  # of one core: the worker's event loop thread, or the server
MACHINE_BUSY = 0.90  # of all cores
SERVER_SHARE = 0.45  # of all cores: the dev server is one of four busy processes here
CORES = os.cpu_count() or 1
HELD_SHARE = 0.95  # below this share of N running, the size was not reached


@dataclass
class Reading:
    """Every counter at one moment."""

    at: float
    worker_cpu: float
    worker_loop_cpu: float
    server_cpu: float
    core_cpu: float
    machine_busy: float
    machine_total: float
    commits: int
    rows_written: int
    sessions: int  # connections ever opened to the bench database (PostgreSQL's pg_stat_database.sessions)
    bench_queries: int
    metrics: dict[str, float]  # the SDK's
    health: dict[str, float]  # the worker's own (helper_runtime_*): its pauses


@dataclass
class Bench:
    stack: ProcessStack
    step_range_s: tuple[float, float]
    steps: int
    helpers: list[tuple[str, str]] = field(default_factory=list)  # (owner, helper id), admission order
    owners: int = 0
    bench_queries: int = 0  # transactions this process makes on the bench database
    observations: list[tuple[float, float]] = field(default_factory=list)  # (monotonic at, ms)
    fewest_free_slots: dict[str, float] = field(default_factory=dict)  # activity worker series -> fewest seen
    refused: int = 0
    unavailable: int = 0
    busy: int = 0  # admissions told to ask again (`busy`), each asked again
    late: int = 0  # admissions taken but answered after the starter's bound (`accepted`)

    async def query(self, sql: str) -> Any:
        self.bench_queries += 1
        async with self.stack.store.engine.connect() as connection:
            return (await connection.execute(text(sql))).first()

    async def running(self) -> int:
        row = await self.query("SELECT count(*) FROM helper_rows WHERE state = 'running'")
        return int(row[0])

    async def reading(self) -> Reading:
        stack = self.stack
        stats = await self.query(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted, sessions FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        busy, total = machine_busy_seconds()
        threads = thread_cpu_seconds(stack.worker.pid)
        return Reading(
            at=time.monotonic(),
            worker_cpu=process_cpu_seconds(stack.worker.pid),
            worker_loop_cpu=threads.get(MAIN_THREAD, 0.0),
            server_cpu=process_cpu_seconds(stack.server.pid),
            core_cpu=process_cpu_seconds(stack.core.pid),
            machine_busy=busy,
            machine_total=total,
            commits=int(stats[0]),
            rows_written=int(stats[1]),
            sessions=int(stats[2]),
            bench_queries=self.bench_queries,
            metrics=await scrape_metrics(stack.metrics_url),
            health=await scrape_metrics(stack.health_url),
        )

    # --- the ramp ------------------------------------------------------------------------------------

    async def admit(self, owner: str, number: int) -> None:
        step_ms = round(random.uniform(*self.step_range_s) * 1000)
        task = scripted_task(
            "Watch the shared inbox and note what changes.",
            steps=self.steps,
            step_ms=step_ms,
            input_growth=100,  # far from the core's 4,000,000 input ceiling after 79 steps
        )
        request = HelperRequest(owner=owner, helper_id=f"watch-{number}", task=task, model="scripted")
        while True:
            try:
                await self.stack.client.start(request)
            except Busy as busy:  # nothing was taken: asked again when told, as Iva does
                self.busy += 1
                await asyncio.sleep(busy.retry_after_s)
                continue
            except Accepted:  # taken, answered late: it is carried out
                self.late += 1
            except HelperRefused:
                self.refused += 1
                return
            except Unavailable:
                self.unavailable += 1
                return
            break
        self.helpers.append((owner, request.helper_id))

    async def ramp_to(self, size: int) -> float:
        """Admit helpers until `size` are admitted; returns the admissions per second."""
        wanted = size - len(self.helpers)
        owners = [f"owner-{number}" for number in range(self.owners, self.owners + math.ceil(wanted / 3))]
        self.owners += len(owners)
        lanes = asyncio.Semaphore(ADMITTING_LANES)
        started = time.monotonic()

        async def owner_admits(owner: str, count: int) -> None:
            async with lanes:
                for number in range(count):
                    await self.admit(owner, number)

        counts = [min(RUNNING_PER_OWNER, wanted - RUNNING_PER_OWNER * index) for index in range(len(owners))]
        await asyncio.gather(*(owner_admits(owner, count) for owner, count in zip(owners, counts, strict=True)))
        return wanted / max(time.monotonic() - started, 1e-6)

    async def wait_running(self, size: int, within_s: float) -> int:
        deadline = time.monotonic() + within_s
        while True:
            running = await self.running()
            if running >= size or time.monotonic() > deadline:
                return running
            await asyncio.sleep(1.0)

    # --- what runs through the whole bench: observation and slot samples ----------------------------------

    async def watch(self, owner: str, helper_id: str, core: httpx.AsyncClient) -> None:
        """Follow one session by long poll as the worker does; time each new step until the row shows it."""
        session_id = None
        while session_id is None:
            row = await self.stack.store.get(owner, helper_id)
            self.bench_queries += 1
            session_id = row.session_id if row is not None else None
            if session_id is None:
                await asyncio.sleep(1.0)
        version, steps = None, 0
        while True:
            params: dict[str, str] = {} if version is None else {"after": str(version), "wait_ms": "20000"}
            try:
                answer = await core.get(f"/v1/sessions/{session_id}", params=params)
            except httpx.HTTPError:
                await asyncio.sleep(1.0)
                continue
            if answer.status_code != 200:
                return  # the session ended
            snapshot = answer.json()
            version, seen = snapshot.get("version"), len(snapshot.get("steps", []))
            if seen > steps and steps > 0:
                changed_at = time.monotonic()
                while time.monotonic() - changed_at < 30:
                    row = await self.stack.store.get(owner, helper_id)
                    self.bench_queries += 1
                    if row is not None and row.steps >= seen:
                        self.observations.append((changed_at, (time.monotonic() - changed_at) * 1000))
                        break
                    await asyncio.sleep(0.01)
            steps = seen
            if snapshot.get("status") not in ("running", "created", None):
                return

    async def sample_slots(self) -> None:
        while True:
            await asyncio.sleep(SLOTS_EVERY_S)
            with contextlib.suppress(httpx.HTTPError):
                for key, available in (await scrape_metrics(self.stack.metrics_url)).items():
                    if key.startswith("temporal_worker_task_slots_available{") and ACTIVITY_WORKER in key:
                        queue = key.partition('task_queue="')[2].partition('"')[0]
                        self.fewest_free_slots[queue] = min(available, self.fewest_free_slots.get(queue, available))

    async def follow_timeouts(self) -> tuple[int, int]:
        """Of every helper: follows whose last attempt timed out, and helpers with no running follow."""
        timed_out, not_following = 0, 0
        lanes = asyncio.Semaphore(DESCRIBING_LANES)

        async def one(owner: str, helper_id: str) -> None:
            nonlocal timed_out, not_following
            async with lanes:
                handle = self.stack.client.temporal.get_workflow_handle(helper_workflow_id(owner, helper_id))
                try:
                    description = await handle.describe()
                except RPCError:
                    not_following += 1
                    return
                follows = [
                    p for p in description.raw_description.pending_activities if p.activity_type.name == FOLLOW_SESSION
                ]
                if not follows:
                    not_following += 1
                for pending in follows:
                    if pending.last_failure.HasField("timeout_failure_info"):
                        timed_out += 1

        await asyncio.gather(*(one(owner, helper_id) for owner, helper_id in self.helpers))
        return timed_out, not_following


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def histogram_mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float | None:
    """The mean of a histogram's observations between two scrapes (the SDK reports milliseconds)."""
    count = (metric(after, name + "_count") or 0) - (metric(before, name + "_count") or 0)
    total = (metric(after, name + "_sum") or 0) - (metric(before, name + "_sum") or 0)
    return total / count if count else None


@dataclass
class SizeResult:
    size: int
    held: int
    limits_hit: list[str]


def report_window(
    bench: Bench,
    size: int,
    held: int,
    before: Reading,
    after: Reading,
    idle: tuple[int, float],
    timeouts: tuple[int, int],
) -> list[str]:
    """Print one size's figures, each beside its target; returns the limits this size hit, with their evidence."""
    stack = bench.stack
    idle_rss, idle_cores = idle
    seconds = after.at - before.at
    helper_minutes = max(held, 1) * seconds / 60
    worker_cores = (after.worker_cpu - before.worker_cpu) / seconds
    loop_cores = (after.worker_loop_cpu - before.worker_loop_cpu) / seconds
    server_cores = (after.server_cpu - before.server_cpu) / seconds
    core_cores = (after.core_cpu - before.core_cpu) / seconds
    machine = (after.machine_busy - before.machine_busy) / max(after.machine_total - before.machine_total, 1e-6)
    worker_ms = 1000 * (after.worker_cpu - before.worker_cpu) / helper_minutes
    net_ms = 1000 * max(0.0, worker_cores - idle_cores) * seconds / helper_minutes
    target_ms = TARGET_WORKER_CORES_AT_TARGET * 60_000 / TARGET_HELPERS
    rss = process_rss_bytes(stack.worker.pid)
    # This process's reads are rolled back, not committed: every commit is a write (PostgreSQL's statistics lag
    # by up to a few seconds, which a window of minutes makes small).
    commits = after.commits - before.commits
    rows = after.rows_written - before.rows_written
    window = [ms for at, ms in bench.observations if before.at <= at <= after.at]
    print(f"\n-- {size} helpers admitted over {bench.owners} owners; window {seconds:.0f} s", flush=True)
    print(f"running helpers held: project {held} | target ≥ {TARGET_HELPERS} on one replica (asked for {size})")
    print(
        f"worker RSS per running helper: project {(rss - idle_rss) / max(held, 1) / 1024:.0f} KiB "
        f"({rss / 2**20:.0f} MiB in all) | baseline idle worker {idle_rss / 2**20:.0f} MiB"
    )
    print(
        f"worker CPU per running helper-minute: project {worker_ms:.1f} ms ({worker_cores:.2f} cores; "
        f"{worker_ms * TARGET_HELPERS / 60_000:.2f} cores at {TARGET_HELPERS:,}), over the idle worker's "
        f"{idle_cores:.3f} cores {net_ms:.1f} ms | target ≤ {target_ms:.0f} ms (≤ {TARGET_WORKER_CORES_AT_TARGET} "
        f"core at {TARGET_HELPERS:,}); its event-loop thread {loop_cores:.2f} cores"
    )
    print(f"follow attempts timed out: {timeouts[0]} | target 0; helpers without a running follow {timeouts[1]}")
    print(
        f"observation under load (core step -> row), p99: project {percentile(window, 0.99):.0f} ms "
        f"(n={len(window)}, median {statistics.median(window) if window else float('nan'):.0f} ms) "
        f"| target ≤ {TARGET_OBSERVATION_P99_MS} ms"
    )
    print(
        f"Temporal server CPU per running helper-minute: {1000 * server_cores * seconds / helper_minutes:.1f} ms "
        f"({server_cores:.2f} cores; for information); reference core {core_cores:.2f} cores; machine "
        f"{100 * machine:.0f} % of {CORES} cores busy"
    )
    print(
        f"store writes per helper-minute: project {commits / helper_minutes:.2f} commits, "
        f"{rows / helper_minutes:.2f} rows written | baseline steps per helper-minute "
        f"{60 / statistics.mean(bench.step_range_s):.2f} (one row write each); connections the store opened in the "
        f"window: project {after.sessions - before.sessions} | target 0 (the worker's pool holds its connections)"
    )
    metrics = after.metrics
    sticky = metric(metrics, "temporal_sticky_cache_size")
    evictions = (metric(metrics, "temporal_sticky_cache_total_forced_eviction") or 0) - (
        metric(before.metrics, "temporal_sticky_cache_total_forced_eviction") or 0
    )
    activity_wait = histogram_mean_ms(before.metrics, metrics, "temporal_activity_schedule_to_start_latency")
    workflow_wait = histogram_mean_ms(before.metrics, metrics, "temporal_workflow_task_schedule_to_start_latency")
    full = pauses_between(before.health, after.health, "helper_runtime_gc_pause_seconds", 'generation="2"')
    young = pauses_between(before.health, after.health, "helper_runtime_gc_pause_seconds", 'generation="1"')
    lag = pauses_between(before.health, after.health, "helper_runtime_event_loop_lag_seconds")
    writes = pauses_between(before.health, after.health, "helper_runtime_store_write_seconds", 'operation="progress"')
    frozen = (
        metric(before.health, "helper_runtime_gc_frozen_objects"),
        metric(after.health, "helper_runtime_gc_frozen_objects"),
    )
    print(
        f"event-loop pauses in the window: project full collections {full}, generation-1 collections {young}, "
        f"timer lag (due every 100 ms) {lag} | target none over {PAUSE_TARGET_S * 1000:.0f} ms; objects the "
        f"collector does not scan {frozen[0] or 0:,.0f} -> {frozen[1] or 0:,.0f}",
        flush=True,
    )
    print(f"the follows' progress writes in the window (pool wait and round trips): {writes}", flush=True)
    fds, fd_limit = open_files(stack.worker.pid)
    slots = f"{stack.settings.max_concurrent_follows} follow, {stack.settings.max_concurrent_activities} short"
    cache = CACHED_WORKFLOWS
    print(
        f"worker limits: activity slots {slots} (fewest free in the window, by task queue: "
        f"{bench.fewest_free_slots or 'n/a'}); "
        f"sticky cache {sticky} of {cache} workflows ({evictions:.0f} forced evictions); "
        f"file descriptors {fds} of {fd_limit}; mean schedule-to-start: activity "
        f"{_ms(activity_wait)}, workflow task {_ms(workflow_wait)}",
        flush=True,
    )
    hit = []
    if held < HELD_SHARE * size:
        hit.append(
            f"only {held} of {size} running (refused {bench.refused}, unanswered {bench.unavailable}, asked again "
            f"after busy {bench.busy}, answered late {bench.late})"
        )
    for queue, free in bench.fewest_free_slots.items():
        if free <= 0:
            hit.append(f"activity slots of {queue}: all taken")
        elif queue.endswith("-follows") and free < FREE_FOLLOW_SLOTS * stack.settings.max_concurrent_follows:
            hit.append(f"follow slots: {free:.0f} free, under {FREE_FOLLOW_SLOTS:.0%} of them")
    if evictions > 0:
        hit.append(f"sticky cache: {evictions:.0f} forced evictions (full at {sticky or 0:.0f} of {cache} workflows)")
    if fd_limit and fds > 0.9 * fd_limit:
        hit.append(f"file descriptors: {fds} of {fd_limit}")
    if loop_cores > SATURATED_CORE:
        hit.append(f"worker event loop: its thread used {loop_cores:.2f} of one core")
    if server_cores > SERVER_SHARE * CORES:
        hit.append(f"Temporal server: {server_cores:.2f} of the machine's {CORES} cores")
    if machine > MACHINE_BUSY:
        rest = machine * CORES - worker_cores - server_cores - core_cores
        hit.append(
            f"the machine: {100 * machine:.0f} % of its {CORES} cores busy (worker {worker_cores:.2f}, server "
            f"{server_cores:.2f}, reference core {core_cores:.2f}, everything else: PostgreSQL, this bench, other "
            f"users {rest:.2f} cores)"
        )
    if window and percentile(window, 0.99) > TARGET_OBSERVATION_P99_MS:
        hit.append(f"observation p99 {percentile(window, 0.99):.0f} ms over its target")
    if timeouts[0]:
        hit.append(f"{timeouts[0]} follow attempts timed out")
    if lag.over_target or full.over_target:
        hit.append(f"event-loop pauses over {PAUSE_TARGET_S * 1000:.0f} ms: lag {lag}, full collections {full}")
    return hit


def pauses_between(before: dict[str, float], after: dict[str, float], name: str, *labels: str) -> Pauses:
    """A pause histogram's observations between two scrapes: how many, how many over 100 ms, and the bucket the
    longest fell in."""

    def buckets(values: dict[str, float]) -> dict[float, float]:
        found: dict[float, float] = {}
        for key, value in values.items():
            if key.startswith(f"{name}_bucket{{") and all(label in key for label in labels):
                bound = key.split('le="', 1)[1].split('"', 1)[0]
                found[math.inf if bound == "+Inf" else float(bound)] = value
        return found

    was, now = buckets(before), buckets(after)
    seen = {bound: now[bound] - was.get(bound, 0.0) for bound in now}
    count = seen.get(math.inf, 0.0)
    longest = min((bound for bound, cumulative in seen.items() if cumulative >= count), default=0.0) if count else 0.0
    return Pauses(int(count), int(count - seen.get(PAUSE_TARGET_S, count)), longest)


@dataclass(frozen=True)
class Pauses:
    count: int
    over_target: int
    longest_at_most_s: float  # the upper bound of the bucket the longest pause fell in

    def __str__(self) -> str:
        longest = "n/a" if not self.count else f"≤ {self.longest_at_most_s * 1000:.0f} ms"
        if self.longest_at_most_s == math.inf:
            longest = "over 2.5 s"
        return f"{self.count} ({self.over_target} over {PAUSE_TARGET_S * 1000:.0f} ms; longest {longest})"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


# The limits worker.py leaves to the SDK, read from the SDK, so the report follows an SDK change.
WORKER_DEFAULTS = inspect.signature(Worker.__init__).parameters


def print_limits(stack: ProcessStack, env: dict[str, str]) -> None:
    defaults = WORKER_DEFAULTS
    fds, fd_limit = open_files(stack.worker.pid)
    settings = stack.settings
    configured = (
        f"follow slots {settings.max_concurrent_follows}, short activity slots {settings.max_concurrent_activities}"
    )
    print(
        f"worker limits (pid {stack.worker.pid}): {configured}; sticky cache {CACHED_WORKFLOWS} workflows, "
        f"workflow tasks {defaults['max_concurrent_workflow_tasks'].default or 'SDK default (100)'} at once, "
        f"pollers {defaults['workflow_task_poller_behavior'].default} each for workflow and activity tasks (SDK "
        f"defaults, worker.py sets none); HTTP to the core: a connection per call under way, kept alive "
        f"(clients/http.py, H11Transport); store pool {STORE_POOL_SIZE} connections "
        f"(store/database.py); file descriptors {fds} held of {fd_limit}",
        flush=True,
    )


async def run(
    sizes: list[int], window_s: float, settle_s: float, step_range_s: tuple[float, float], postgres: str, ramp_s: float
) -> None:
    largest = max(sizes)
    # The worker's defaults, but for a follow slot per running helper when the sizes ask for more.
    default_follows = Settings.model_fields["max_concurrent_follows"].default
    env = {"HELPER_MAX_CONCURRENT_FOLLOWS": str(largest + 100)} if largest + 100 > default_follows else {}
    # Admissions run at about 10 a second here; each size adds its settle, its window and a sweep of every helper.
    planned_s = largest / 5 + len(sizes) * (settle_s + window_s + 30) + 60
    steps = min(MOST_STEPS, math.ceil(planned_s / step_range_s[0]) + 2)
    if steps * step_range_s[0] < planned_s:
        print(
            f"warning: the fastest helpers end after {steps * step_range_s[0]:.0f} s, the bench plans {planned_s:.0f} s"
        )
    async with process_stack(postgres, env) as stack:
        print_limits(stack, env)
        bench = Bench(stack, step_range_s, steps)
        await asyncio.sleep(3)
        idle_rss = process_rss_bytes(stack.worker.pid)
        idle_from, idle_cpu = time.monotonic(), process_cpu_seconds(stack.worker.pid)
        await asyncio.sleep(min(10.0, settle_s))
        idle_cores = (process_cpu_seconds(stack.worker.pid) - idle_cpu) / (time.monotonic() - idle_from)
        results: list[SizeResult] = []
        async with httpx.AsyncClient(base_url=stack.core_url, trust_env=False, timeout=30) as core:
            watchers: list[asyncio.Task[None]] = []
            sampler = asyncio.create_task(bench.sample_slots())
            try:
                for size in sizes:
                    rate = await bench.ramp_to(size)
                    for owner, helper_id in bench.helpers[len(watchers) : WATCHED]:
                        watchers.append(asyncio.create_task(bench.watch(owner, helper_id, core)))
                    running = await bench.wait_running(size, ramp_s)
                    print(
                        f"\n{size} admitted at {rate:.1f} /s; {running} running (told busy and asked again "
                        f"{bench.busy}, answered late {bench.late})",
                        flush=True,
                    )
                    await asyncio.sleep(settle_s)
                    bench.fewest_free_slots = {}
                    before = await bench.reading()
                    await asyncio.sleep(window_s)
                    after = await bench.reading()
                    held = await bench.running()
                    timeouts = await bench.follow_timeouts()
                    hit = report_window(bench, size, held, before, after, (idle_rss, idle_cores), timeouts)
                    results.append(SizeResult(size, held, hit))
                    if held < HELD_SHARE * size:
                        break  # the next size would only load a machine that is already short
            finally:
                sampler.cancel()
                for watcher in watchers:
                    watcher.cancel()
        conclude(results)
        await report_stop(stack, await bench.running())


async def report_stop(stack: ProcessStack, holding: int) -> None:
    """SIGTERM the worker as Kubernetes stops a pod, and time its exit while it holds every follow."""
    began = time.monotonic()
    stack.worker.terminate()
    try:
        async with asyncio.timeout(STOP_WAIT_S):
            code = await stack.worker.wait()
        seconds = time.monotonic() - began
        print(
            f"worker stop holding {holding} follows: project {seconds:.1f} s from SIGTERM to exit (code {code}) | "
            f"bound: its graceful shutdown {GRACEFUL_SHUTDOWN.total_seconds():.0f} s, within the pod's "
            f"terminationGracePeriodSeconds (30 s)",
            flush=True,
        )
    except TimeoutError:
        print(f"worker stop holding {holding} follows: still running {STOP_WAIT_S:.0f} s after SIGTERM", flush=True)


WATCHED = 50  # sessions this process follows for observation samples
STOP_WAIT_S = 60.0  # twice the pod's termination grace: a stop that takes longer is reported, then killed


def conclude(results: list[SizeResult]) -> None:
    reached = [result for result in results if result.held >= HELD_SHARE * result.size]
    largest = max((result.held for result in reached), default=0)
    print(
        f"\nlargest size held on one replica: project {largest} | target ≥ {TARGET_HELPERS} "
        f"(sizes run: {', '.join(f'{r.size}→{r.held}' for r in results)})"
    )
    first = next((result for result in results if result.limits_hit), None)
    if first is None:
        print(f"first bottleneck: none of the watched limits was hit up to {results[-1].size if results else 0}")
    else:
        print(f"first bottleneck, at {first.size}: " + "; ".join(first.limits_hit), flush=True)


def main() -> None:
    from tools.bench.__main__ import POSTGRES_URL

    parser = argparse.ArgumentParser(prog="python -m tools.bench.capacity", description=__doc__)
    parser.add_argument("--sizes", default="250,500,1000,2000", help="running helpers to hold, in turn")
    parser.add_argument("--window-s", type=float, default=180, help="the measured window at each size")
    parser.add_argument("--settle-s", type=float, default=30, help="after all run, before the window")
    parser.add_argument("--step-s", default="20,60", help="a helper's step pace, drawn per helper from this range")
    parser.add_argument("--ramp-s", type=float, default=600, help="how long to wait for a size to be running")
    parser.add_argument("--postgres", default=POSTGRES_URL, metavar="URL", help="a PostgreSQL server (fresh database)")
    arguments = parser.parse_args()
    low, high = (float(value) for value in arguments.step_s.split(","))
    sizes = [int(size) for size in arguments.sizes.split(",")]
    asyncio.run(run(sizes, arguments.window_s, arguments.settle_s, (low, high), arguments.postgres, arguments.ramp_s))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
