"""Small tools the tests share: waiting for a condition, building requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import make_url, select, text
from sqlalchemy.ext.asyncio import create_async_engine
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.service import RPCError, RPCStatusCode

from config.settings import Settings
from domain.limits import FollowTuning, Limits, Policy
from domain.requests import HelperRequest
from domain.rows import HelperRow, RowState
from protocol.errors import Unavailable
from starter.service.app import create_app, with_guards
from starter.service.connections import Connections
from store.helper_store import HelperStore
from store.records import ParkedSession

if TYPE_CHECKING:
    from starter.client import HelperClient
from store.statements import events_table, plain
from tools.demo.stack import Ports

T = TypeVar("T")

# A fake that stands for a part that never answers in time holds its answer this long. A bounded call ends far
# sooner, and a test tells the two apart by `HANG_S / 3`: how much sooner is a bench's to measure, and a bound as
# tight as the call's own would fail on a loaded machine without anything being wrong.
HANG_S = 30.0
BOUNDED_S = HANG_S / 3


async def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        last = value
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s; last value: {last!r}")


def helper_request(owner: str, helper_id: str, task: str = "Find the Q3 report", **fields: Any) -> HelperRequest:
    return HelperRequest(owner=owner, helper_id=helper_id, task=task, model=fields.pop("model", "scripted"), **fields)


def settings_for(
    tmp_path: Path, core_url: str, chat_url: str, *, skipping_time: bool = False, **policy: object
) -> Settings:
    """Settings for one test: its own store, result directories and task queue; fast following. On the
    time-skipping server (`skipping_time`), whose clock runs ahead of the wall clock once it skips, writes carry no
    accept-by time (protocol.deadlines)."""
    follow = policy.pop("follow", FollowTuning(poll_ms=50, window_ms=100, resume_ms=60_000, silence_ms=600_000))
    limits = policy.pop("limits", Limits())
    return Settings(
        task_queue=f"helpers-{uuid.uuid4().hex[:8]}",
        store=f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}",
        results_dir=tmp_path / "results",
        core_url=core_url,
        chat_url=chat_url,
        policy=Policy(limits=limits, follow=follow, **policy),
        starter_accept_by=not skipping_time,
    )


async def skip_time(env: Any, duration: timedelta, chunk: timedelta = timedelta(minutes=5)) -> None:
    """Let the time-skipping server advance `duration`, in chunks so no single sleep call times out."""
    remaining = duration
    while remaining > timedelta(0):
        step = min(chunk, remaining)
        await env.sleep(step)
        remaining -= step


async def eventually_skipping(
    env: Any, check: Callable[[], Any], budget: timedelta = timedelta(minutes=3), step: timedelta = timedelta(seconds=5)
) -> Any:
    """`eventually` on the time-skipping server: between looks the server may skip `step`, up to `budget` in all.
    That server skips time only while a test waits on it, so a follow attempt waiting on its retry's backoff (the
    tests' follow window is 100 ms) comes round here without a real minute's wait."""
    last: Any = None
    for _ in range(int(budget / step) + 1):
        last = check()
        if asyncio.iscoroutine(last) or isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        await env.sleep(step)
    raise AssertionError(f"condition not met within {budget} of skipped time; last value: {last!r}")


def local_activity_name(event: Any) -> str | None:
    """The activity type of a local activity's marker; None for any other event."""
    if not event.HasField("marker_recorded_event_attributes"):
        return None
    attributes = event.marker_recorded_event_attributes
    if attributes.marker_name != "core_local_activity":
        return None
    for payload in attributes.details["data"].payloads:
        with contextlib.suppress(ValueError):
            return str(json.loads(payload.data).get("activity_type"))
    return None


async def history_events(client: Any, workflow_id: str) -> list[Any]:
    """Every event of a workflow's history, to count what a helper costs the server."""
    return [event async for event in client.get_workflow_handle(workflow_id).fetch_history_events()]


def without_postgres(reason: str) -> NoReturn:
    """Skip a PostgreSQL test on a machine without the server (a newcomer's); fail it where the server must be
    (CI sets HELPER_TESTS_NEED_POSTGRES=1), so a store that is down never passes as skipped."""
    if os.environ.get("HELPER_TESTS_NEED_POSTGRES") == "1":
        pytest.fail(f"{reason} (HELPER_TESTS_NEED_POSTGRES=1: these tests must run here)")
    pytest.skip(reason)


@contextlib.asynccontextmanager
async def fresh_postgres_database(server_url: str) -> AsyncIterator[str]:
    """A new, empty PostgreSQL database on the test server, dropped afterwards; `without_postgres` when no
    server answers. Yields its SQLAlchemy URL."""
    url = make_url(server_url)
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", connect_args={"timeout": 5})
    name = f"t_{uuid.uuid4().hex[:16]}"
    try:
        async with admin.connect() as connection:
            await connection.execute(text(f'CREATE DATABASE "{name}"'))
    except (OSError, TimeoutError) as error:
        await admin.dispose()
        without_postgres(f"no PostgreSQL server answers at {url!r}: {error!r}")
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as connection:
            await connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        await admin.dispose()


def listenable(port: int) -> bool:
    """Whether a server could listen on the loopback port now (as the stack's servers do, with SO_REUSEADDR: a
    closed connection's TIME_WAIT does not count as held)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports a server can listen on, chosen below the kernel's ephemeral range:
    a port from that range may be handed to some outgoing connection between this check and the server's start
    (seen: the local stack's Temporal failed with "address already in use")."""
    low = 32_768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        base = random.randrange(10_000, max(10_001, low - count))
        if all(listenable(port) for port in range(base, base + count)):
            return base
    raise AssertionError(f"no {count} consecutive free ports below {low}")


def free_stack_ports() -> Ports:
    """Ports for every server of a local stack (tools.demo.stack), consecutive and below the ephemeral range."""
    count = len(fields(Ports))
    base = free_port_run(count)
    return Ports(*range(base, base + count))


def free_port() -> int:
    """A TCP port nothing listens on now, on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def delete_workflow(client: Any, workflow_id: str) -> str:
    """Delete the latest run under `workflow_id` from the server, as if its start had been lost; wait until
    the server no longer knows it. Returns the deleted run's id."""
    run_id: str = (await client.get_workflow_handle(workflow_id).describe()).run_id
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        )
    )

    async def missing() -> bool:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            return error.status is RPCStatusCode.NOT_FOUND
        return False

    await eventually(missing, timeout=20)
    return run_id


# --- what a test reads of the store beyond the runtime's own reads ----------------------------------------------


class ChatEvent(BaseModel):
    """A system event offered to the chat, with its delivery state (R26)."""

    key: str
    owner: str
    helper_ids: list[str]
    state: str
    attempts: int
    receipt_id: str | None
    last_error: str | None
    updated_at: datetime


async def run_bounded(*command: str, timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """A command run to its end: its exit code, stdout and stderr; killed and TimeoutError after `timeout`."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return int(process.returncode or 0), out.decode(), err.decode()


def admitted_row(
    owner: str, helper_id: str, *, at: datetime, seq: int = 1, result_dir: str | Path | None = None, **fields: Any
) -> HelperRow:
    """A helper's row as its admission writes it (waiting, generation 1), with whatever else the test names: the one
    way the tests make a row without running a coordinator."""
    values: dict[str, Any] = {
        "owner": owner,
        "helper_id": helper_id,
        "seq": seq,
        "state": RowState.WAITING,
        "task": "Find the Q3 report",
        "language": "en",
        "model": "scripted",
        "limits": Limits(),
        "result_dir": str(result_dir or f"/results/{owner}/{helper_id}.{seq}"),
        "admitted_at": at,
        "generation": 1,
        "updated_at": at,
    }
    return HelperRow(**(values | fields))


@contextlib.asynccontextmanager
async def service_client(
    settings: Settings, connections: Connections | None = None, *, raise_app_exceptions: bool = True
) -> AsyncIterator[httpx.AsyncClient]:
    """The starter API in this process, behind the guards its server puts in front (`settings.service`), and a
    client of it; the app's store connections are closed after."""
    app = create_app(settings, connections)
    transport = httpx.ASGITransport(app=with_guards(app, settings.service), raise_app_exceptions=raise_app_exceptions)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=30) as client:
            yield client
    finally:
        await app.state.service.connections.aclose()


async def rows_of(store: HelperStore, owner: str, states: Iterable[RowState] | None = None) -> list[HelperRow]:
    """An owner's whole rows (in some states), in admission order: each helper its listing shows, read as the worker
    reads one row."""
    rows = [await store.get(owner, view.helper_id) for view in await store.reads.views(owner, states)]
    return [row for row in rows if row is not None]


async def chat_events(store: HelperStore, owner: str) -> list[ChatEvent]:
    """The chat events recorded for an owner, oldest change first: what an operator finds in `chat_events`."""
    table = events_table
    async with store.engine.connect() as connection:
        result = await connection.execute(select(table).where(table.c.owner == owner).order_by(table.c.updated_at))
        return [ChatEvent.model_validate(plain(record)) for record in result.mappings()]


async def parked_of(store: HelperStore, owner: str) -> list[ParkedSession]:
    """An owner's parked sessions, as the sweep finds them."""
    return [parked for parked in await store.parked_sessions(limit=10_000) if parked.owner == owner]


async def start_asking_again(client: HelperClient, request: HelperRequest, tries: int = 3) -> None:
    """As a caller does: `unavailable` (nothing taken; on a loaded machine the write reached the coordinator after
    its accept-by time) is asked again after the time it names."""
    for attempt in range(1, tries + 1):
        try:
            await client.start(request)
            return
        except Unavailable as error:
            if attempt == tries:
                raise
            await asyncio.sleep(error.retry_after_s or 1)
