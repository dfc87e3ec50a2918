"""The starter API (`helper-starter serve`) as Iva calls it: per-turn reads, admissions, and many clients at once
(R47: a chat turn pays milliseconds for a read).

    .venv/bin/python -m tools.bench.api [--owners 1000] [--samples 300] [--starts 100] [--clients 200]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]

The service runs as its own process (`helper-starter serve`) on a dev server, a worker and the programmable core
(`tools.bench.common.bench_stack`), its store (SQLite, then PostgreSQL with `--postgres`) filled with helper rows
in every state for `--owners` owners
(20 each, as `tools.bench.reads` fills it). Over one keep-alive HTTP connection, taking turns:

- `unreported`, `list` and `waits` (the inbox, R56) of a random owner against `/readyz`, which is one `SELECT 1`
  through the same service's store connection: the HTTP round trip plus one store round trip, the least a read can cost;
- `start`, `close` and `delivered` (to owners whose coordinators run) against the same calls made straight to
  Temporal: the admission's update-with-start and the updates, on the same coordinators, in turns (what the
  service adds to the Temporal call it makes);
- the same `start` against the raw update-with-start of a trivial workflow that is already running (its update
  returns at once, served by a worker in this process): what an admission at rest costs beyond Temporal's own
  call (R51), and, beside it, the time from sending a start that finds a free slot to the core receiving the
  helper's create (its first core call).

Then `--clients` clients at once, each on a connection of its own, each reading `unreported` and `list` in turns:
every answer must be a 200 (the figure line says how many were not).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from config.settings import Settings
from domain.limits import Policy
from domain.messages.updates import DeliveredRequest
from protocol.deadlines import reply_by
from protocol.names import helper_workflow_id
from protocol.update_senders import admit, close_helper, mark_delivered
from starter.inputs import parse_request
from tests.fakes.fake_core import FakeCore, FakeSession
from tools.bench.admission import EchoWorkflow
from tools.bench.common import bench_stack, free_port, poll_until
from tools.bench.reads import fill_rows

BIN = Path(sys.executable).parent
ROWS_PER_OWNER = 20
START_OWNERS = 10
ECHO_QUEUE = "bench-echo"


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[round(0.50 * (len(ordered) - 1))], ordered[round(0.99 * (len(ordered) - 1))]


def _line(name: str, baseline_name: str, project: list[float], baseline: list[float]) -> str:
    (p50, p99), (b50, b99) = _percentiles(project), _percentiles(baseline)
    return (
        f"{name}: project p50={p50:.2f} ms p99={p99:.2f} ms | baseline ({baseline_name}) p50={b50:.2f} ms "
        f"p99={b99:.2f} ms | ratio ×{p50 / b50:.1f} / ×{p99 / b99:.1f}"
    )


@dataclass(frozen=True)
class Served:
    url: str
    pid: int


@contextlib.asynccontextmanager
async def serving(environment: dict[str, str]) -> AsyncIterator[Served]:
    """`helper-starter serve` on a free loopback port, stopped (SIGTERM, as Kubernetes stops it) at the end."""
    bind = f"127.0.0.1:{free_port()}"
    process = await asyncio.create_subprocess_exec(
        str(BIN / "helper-starter"),
        "serve",
        "--bind",
        bind,
        env=environment,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://{bind}"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                if process.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"helper-starter serve did not become ready (exit {process.returncode})")
                await asyncio.sleep(0.1)
        yield Served(url, process.pid)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def _timed(request: Awaitable[httpx.Response]) -> float:
    """The time to the answer of a request not yet sent (a coroutine sends nothing until it is awaited)."""
    started = time.perf_counter()
    response = await request
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code not in (200, 201):
        raise RuntimeError(f"{response.request.url.path}: {response.status_code} {response.text[:300]}")
    return elapsed


async def reads(url: str, owners: int, samples: int) -> list[str]:
    durations: dict[str, list[float]] = {"unreported": [], "list": [], "waits": [], "select": []}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await client.get("/readyz")
        for _ in range(samples):
            owner = f"owner-{random.randrange(owners):06d}"
            durations["unreported"].append(await _timed(client.get(f"/v1/owners/{owner}/unreported")))
            durations["list"].append(await _timed(client.get(f"/v1/owners/{owner}/helpers")))
            durations["waits"].append(await _timed(client.get(f"/v1/owners/{owner}/waits")))
            durations["select"].append(await _timed(client.get("/readyz")))
    baseline = "SELECT 1 through the service's store connection, GET /readyz"
    return [
        _line("api unreported (HTTP)", baseline, durations["unreported"], durations["select"]),
        _line("api list (HTTP)", baseline, durations["list"], durations["select"]),
        _line("api waits (HTTP)", baseline, durations["waits"], durations["select"]),
    ]


@dataclass
class WriteTimes:
    """Milliseconds per call, through the service and straight to the same coordinators."""

    through_service: dict[str, list[float]] = field(default_factory=lambda: {"start": [], "close": [], "delivered": []})
    raw: dict[str, list[float]] = field(default_factory=lambda: {"start": [], "close": [], "delivered": []})
    trivial_start: list[float] = field(default_factory=list)
    to_first_core_call: list[float] = field(default_factory=list)


async def writes(url: str, temporal: Client, settings: Settings, core: FakeCore, samples: int) -> WriteTimes:
    """Each sample admits, closes and delivers once through the service and once by the raw update on the same
    owner's coordinator (update-with-start for the admission), in turns, so both meet the same worker and server;
    then makes the raw update-with-start of a trivial running workflow. Each admitted helper finds a free slot;
    it is closed once the core has its session, so every close stops a running helper."""
    owners = [f"api-owner-{n}" for n in range(START_OWNERS)]
    times = WriteTimes()
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def through_service(owner: str, helper_id: str, record: bool) -> None:
            body = {"helper_id": helper_id, "model": "scripted", "task": "Admit."}
            sent = time.perf_counter()
            started = await _timed(client.post(f"/v1/owners/{owner}/helpers", json=body))
            session = await _created(core, helper_id)
            timed = {
                "start": started,
                "close": await _timed(client.post(f"/v1/owners/{owner}/helpers/{helper_id}/close")),
                "delivered": await _timed(
                    client.post(f"/v1/owners/{owner}/delivered", json={"turn": helper_id, "answer_chars": 1})
                ),
            }
            await _ended(temporal, owner, helper_id)
            if record:
                for name, elapsed in timed.items():
                    times.through_service[name].append(elapsed)
                times.to_first_core_call.append((session.created_at - sent) * 1000)

        async def raw(owner: str, helper_id: str) -> None:
            request = parse_request(
                {"owner": owner, "helper_id": helper_id, "model": "scripted", "task": "Admit."}, settings
            )
            delivered = DeliveredRequest(owner=owner, turn=helper_id, answer_chars=1)
            started = await _timed_call(admit(temporal, settings, request, reply_by(settings)))
            await _created(core, helper_id)
            timed = {
                "start": started,
                "close": await _timed_call(close_helper(temporal, settings, owner, helper_id, reply_by(settings))),
                "delivered": await _timed_call(mark_delivered(temporal, settings, delivered, reply_by(settings))),
            }
            await _ended(temporal, owner, helper_id)
            for name, elapsed in timed.items():
                times.raw[name].append(elapsed)

        async def trivial(owner: str) -> float:
            running = WithStartWorkflowOperation(
                EchoWorkflow.run,
                id=f"echo/{owner}",
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                task_queue=ECHO_QUEUE,
            )
            return await _timed_call(
                temporal.execute_update_with_start_workflow(EchoWorkflow.echo, owner, start_workflow_operation=running)
            )

        for owner in owners:  # every coordinator and trivial workflow runs before the first timed call
            await through_service(owner, "warm", record=False)
            await trivial(owner)
        for number in range(samples):
            owner = owners[number % START_OWNERS]
            await through_service(owner, f"s{number}", record=True)
            await raw(owner, f"r{number}")
            times.trivial_start.append(await trivial(owner))
    return times


async def _created(core: FakeCore, helper_id: str) -> FakeSession:
    """The helper's session, once its create reached the core (bounded: a lost helper ends the bench)."""
    await asyncio.wait_for(poll_until(lambda: core.session_of(helper_id) is not None, interval=0.002), 30)
    session = core.session_of(helper_id)
    assert session is not None
    return session


async def _timed_call(call: Awaitable[object]) -> float:
    started = time.perf_counter()
    await call
    return (time.perf_counter() - started) * 1000


async def _ended(temporal: Client, owner: str, helper_id: str) -> None:
    """The closed helper's workflow has ended: the next call meets an idle worker and server, as Iva's usually do."""
    with contextlib.suppress(WorkflowFailureError):
        await temporal.get_workflow_handle(helper_workflow_id(owner, helper_id)).result()


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, path: str) -> int:
    """One GET on a kept-alive HTTP/1.1 connection: its status, the body read and dropped."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:"))
    await reader.readexactly(length)
    return int(head[0].split()[1])


async def many_clients(url: str, owners: int, clients: int, rounds: int) -> str:
    """`clients` clients at once, each on a connection of its own. They speak HTTP/1.1 on bare streams: httpx's
    connection pool, holding hundreds of connections in one process, costs far more than the service answering."""
    durations: list[float] = []
    failures: list[str] = []
    host, _, port = url.removeprefix("http://").partition(":")

    async def one_client() -> None:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError as error:
            failures.extend([f"connect: {error}"] * rounds)
            return
        try:
            for round_number in range(rounds):
                owner = f"owner-{random.randrange(owners):06d}"
                path = f"/v1/owners/{owner}/unreported" if round_number % 2 else f"/v1/owners/{owner}/helpers"
                started = time.perf_counter()
                try:
                    status = await _get(reader, writer, host, path)
                except (OSError, ValueError, asyncio.IncompleteReadError) as error:
                    failures.append(f"{type(error).__name__}: {str(error)[:120]}")
                    return
                durations.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    failures.append(f"{path}: {status}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    wall = time.perf_counter() - started
    p50, p99 = _percentiles(durations) if durations else (0.0, 0.0)
    shown = f" (first: {failures[0]})" if failures else ""
    return (
        f"api {clients} concurrent clients: {len(durations)} reads in {wall:.1f} s, p50={p50:.1f} ms "
        f"p99={p99:.1f} ms | target every read answered 200: {len(failures)} not{shown}"
    )


async def measure(owners: int, samples: int, start_samples: int, clients: int, postgres: str | None) -> list[str]:
    lines = [
        f"-- SQLite, {owners:,} owners × {ROWS_PER_OWNER} rows",
        *await measure_on(owners, samples, start_samples, clients, None),
    ]
    if postgres:
        from tests.helpers import fresh_postgres_database

        async with fresh_postgres_database(postgres) as database:
            lines.append(f"-- PostgreSQL, {owners:,} owners × {ROWS_PER_OWNER} rows")
            lines += await measure_on(owners, samples, start_samples, clients, database)
    return lines


async def measure_on(owners: int, samples: int, start_samples: int, clients: int, store_url: str | None) -> list[str]:
    async with bench_stack(Policy(), store_url) as stack:
        await fill_rows(stack.settings.store.text, owners, ROWS_PER_OWNER, False)
        temporal = stack.client.temporal
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
            "HELPER_ENV_FILE": os.devnull,
            "TEMPORAL_ADDRESS": temporal.service_client.config.target_host,
            "HELPER_TASK_QUEUE": stack.settings.task_queue,
            "HELPER_STORE_URL": stack.settings.store.text,
            "HELPER_RESULTS_DIR": str(stack.settings.results_dir),
            "HELPER_CORE_URL": stack.settings.core_url,
            "HELPER_CHAT_URL": stack.settings.chat_url,
            "HELPER_CODEC_REQUIRED": "false",
        }
        async with serving(environment) as served:
            url = served.url
            lines = await reads(url, owners, samples)
            async with Worker(temporal, task_queue=ECHO_QUEUE, workflows=[EchoWorkflow]):
                times = await writes(url, temporal, stack.settings, stack.core, start_samples)
            for name, baseline in (("start", "update-with-start"), ("close", "update"), ("delivered", "update")):
                lines.append(
                    _line(
                        f"api {name} (HTTP)",
                        f"the same {baseline} straight to the coordinator",
                        times.through_service[name],
                        times.raw[name],
                    )
                )
            lines.append(
                _line(
                    "api start (HTTP), an admission at rest",
                    "the raw update-with-start of a trivial running workflow; target ≤ ×1.5",
                    times.through_service["start"],
                    times.trivial_start,
                )
            )
            first_p50, first_p99 = _percentiles(times.to_first_core_call)
            lines.append(
                f"api start (HTTP) to the helper's first core call (its create), a free slot: "
                f"p50={first_p50:.2f} ms p99={first_p99:.2f} ms"
            )
            lines.append(await many_clients(url, owners, clients, rounds=max(2, samples // 50)))
            return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.api", description=__doc__)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--postgres", metavar="URL", help="also on a PostgreSQL server (a fresh database)")
    arguments = parser.parse_args()
    lines = asyncio.run(
        measure(arguments.owners, arguments.samples, arguments.starts, arguments.clients, arguments.postgres)
    )
    for line in lines:
        print(line, flush=True)
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
