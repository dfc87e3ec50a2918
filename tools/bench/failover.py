"""A worker replica lost while it follows running helpers: how long until they report progress again, after a
SIGSTOP, a graceful SIGTERM and a SIGKILL in the same run (R46, R57, the liveness bound).

    .venv/bin/python -m tools.bench.failover [--helpers 24] [--replicas 3] [--step-ms 3000]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]

The deployment's layout on loopback (`tools.demo.stack`): the dev server, `--replicas` worker replicas (each
`python worker.py`, a process of its own, at the defaults), the reference core, the starter API, and a fresh
PostgreSQL database for the store. `--helpers` helpers, three per owner, each a session that makes a step every
`--step-ms` up to a helper's step ceiling (79 steps: 4 minutes at the default), longer than the bench runs. Once
every helper's row shows steps:

1. the replica that follows the most helpers is frozen with SIGSTOP, as a node cut off or a process stalled;
   once every helper stepped again it goes on (SIGCONT), and its log shows how many of its follow attempts then
   ended because they run elsewhere;
2. once every follow runs on a live replica, the replica that follows the most is stopped with SIGTERM, as
   Kubernetes stops a pod;
3. once every follow runs again, the replica that follows the most of the rest is SIGKILLed, as a lost node or
   a container killed for memory ends.

After each, every helper is timed from the signal until its row shows a step newer than the one it showed at the
signal. The stopped replica's helpers are the figure; the other replicas' helpers, timed over the same window,
are its baseline: they show the measure's own resolution (a step every `--step-ms`, then the follow's read).
Which replica follows a helper is the follow activity's last worker identity (`pid@host`), as the server records
it. Then, for every helper: still one session (the row's session id unchanged) and still running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from activities.session import SUPERSEDED
from config.settings import Settings
from domain.limits import TURN_MAX_STEPS_HELPER
from domain.requests import HelperRequest
from protocol.connection import connect_for
from protocol.names import FOLLOW_SESSION, helper_workflow_id
from reference.core.script import scripted_task
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.helpers import free_port, free_stack_ports, fresh_postgres_database
from tools.demo.stack import HOST, Stack, wait_for_http

POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
HELPERS_PER_OWNER = 3
# How often the bench reads the rows while it waits for new steps.
POLL_S = 0.1
# How long a lost follow may take to run again before the bench gives up on it: well past every target.
GIVE_UP_S = 90.0


@dataclass(frozen=True)
class Helper:
    owner: str
    helper_id: str


@dataclass
class Failover:
    """One replica stopped: each helper's seconds from the signal to its next step (None: none came in time)."""

    replica: str
    signal: str
    followed: list[Helper]
    others: list[Helper]
    seconds: dict[Helper, float | None]
    exit_s: float | None = None
    superseded: int | None = None  # a frozen replica's attempts that ended once it went on


def _spread(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50={statistics.median(ordered):.1f} s p99={p99:.1f} s max={ordered[-1]:.1f} s"


def report(failover: Failover, step_s: float, target: str) -> list[str]:
    theirs = [failover.seconds[h] for h in failover.followed]
    others = [failover.seconds[h] for h in failover.others]
    missing = sum(1 for value in theirs + others if value is None)
    lines = [
        f"failover, {failover.signal} of {failover.replica} (following {len(failover.followed)} of "
        f"{len(failover.followed) + len(failover.others)} helpers): its helpers' next step "
        f"{_spread([v for v in theirs if v is not None])} | baseline (the other replicas' helpers in the same "
        f"window, a step every {step_s:.1f} s) {_spread([v for v in others if v is not None])} | target {target}",
    ]
    if failover.exit_s is not None:
        lines.append(f"  {failover.replica} exited {failover.exit_s:.1f} s after {failover.signal}")
    if failover.superseded is not None:
        lines.append(
            f"  {failover.replica} went on (SIGCONT): {failover.superseded} of its {len(failover.followed)} follow "
            "attempts ended within 30 s, their helpers followed elsewhere"
        )
    if missing:
        lines.append(f"  {missing} helpers showed no new step before the bench gave up on them")
    return lines


async def followers(temporal: Client, stack: Stack, helpers: list[Helper]) -> dict[Helper, str]:
    """The replica whose worker last started each helper's follow activity (a helper without one is left out)."""
    by_pid = {str(stack.pid(name)): name for name in stack.worker_names if _alive(stack, name)}
    found: dict[Helper, str] = {}
    for helper in helpers:
        description = await temporal.get_workflow_handle(helper_workflow_id(helper.owner, helper.helper_id)).describe()
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name == FOLLOW_SESSION and pending.last_worker_identity:
                replica = by_pid.get(pending.last_worker_identity.partition("@")[0])
                if replica is not None:
                    found[helper] = replica
    return found


def _alive(stack: Stack, name: str) -> bool:
    return any(known == name and process.poll() is None for known, process in stack.processes)


async def steps_of(store: HelperStore, helpers: list[Helper]) -> dict[Helper, int]:
    rows = await asyncio.gather(*(store.get(h.owner, h.helper_id) for h in helpers))
    return {h: row.steps if row is not None else -1 for h, row in zip(helpers, rows, strict=True)}


@dataclass
class Replicas:
    """The deployment's layout on loopback, with several worker replicas, and what a caller uses of it."""

    stack: Stack
    settings: Settings  # the workers' own, the follow's tuning too
    store: HelperStore
    temporal: Client
    client: HelperClient


@contextlib.asynccontextmanager
async def running_replicas(data: Path, database: str, replicas: int) -> AsyncIterator[Replicas]:
    """`tools.demo.stack` with `replicas` workers on the PostgreSQL `database`, every replica answering."""
    stack = Stack(
        data,
        free_stack_ports(),
        workers=replicas,
        store_url=database,
        worker_health_ports=tuple(free_port() for _ in range(replicas)),
    )
    store: HelperStore | None = None
    try:
        await stack.start(fresh=True)
        for name, port in zip(stack.worker_names, stack.worker_health_ports, strict=True):
            await wait_for_http(name, f"http://{HOST}:{port}/livez", stack, timeout=60)
        settings = Settings.from_env(stack.environment())
        store = await HelperStore.connect(database)
        temporal = await connect_for(settings)
        yield Replicas(stack, settings, store, temporal, HelperClient(settings, store.reads, temporal))
    finally:
        if store is not None:
            await store.close()
        stack.stop()


async def admit(replicas: Replicas, helpers: list[Helper], task: str) -> None:
    for helper in helpers:
        request = HelperRequest(owner=helper.owner, helper_id=helper.helper_id, task=task, model="scripted")
        await replicas.client.start(request)


async def until_followed(replicas: Replicas, helpers: list[Helper], within_s: float) -> None:
    """Until every helper's row shows a step and its follow runs on a live replica."""
    deadline = time.monotonic() + within_s
    while min((await steps_of(replicas.store, helpers)).values()) < 1 or len(
        await followers(replicas.temporal, replicas.stack, helpers)
    ) < len(helpers):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every helper stepped and was followed on a live replica within {within_s:.0f} s")
        await asyncio.sleep(0.5)


async def stop_one(
    stack: Stack, temporal: Client, store: HelperStore, helpers: list[Helper], *, how: str, give_up_s: float
) -> Failover:
    """Stop the replica that follows the most helpers (`how`: SIGTERM, SIGKILL or SIGSTOP) and time every helper's
    next step from the signal. A frozen replica is let go on (SIGCONT) once every helper stepped again."""
    following = await followers(temporal, stack, helpers)
    replica, _ = Counter(following.values()).most_common(1)[0]
    followed = [h for h in helpers if following.get(h) == replica]
    failover = Failover(replica, how, followed, [h for h in helpers if h not in followed], {})
    before = await steps_of(store, helpers)
    signalled = time.monotonic()
    stopping = None
    if how == "SIGKILL":
        stack.kill(replica)
    elif how == "SIGTERM":
        stopping = asyncio.create_task(stack.terminate(replica, grace_s=30))
    else:
        os.killpg(stack.pid(replica), signal.SIGSTOP)
    waiting = set(helpers)
    while waiting and time.monotonic() - signalled < give_up_s:
        now_steps = await steps_of(store, list(waiting))
        elapsed = time.monotonic() - signalled
        for helper, steps in now_steps.items():
            if steps > before[helper]:
                failover.seconds[helper] = elapsed
                waiting.discard(helper)
        await asyncio.sleep(POLL_S)
    for helper in waiting:
        failover.seconds[helper] = None
    if stopping is not None:
        failover.exit_s = await stopping
    if how == "SIGSTOP":
        os.killpg(stack.pid(replica), signal.SIGCONT)
        failover.superseded = await _superseded_after_thaw(stack, replica, len(followed))
    return failover


async def _superseded_after_thaw(stack: Stack, replica: str, attempts: int, within_s: float = 30.0) -> int:
    """How many of a thawed replica's follow attempts ended because they run elsewhere now, from its log."""
    log = stack.logs / f"{replica}.log"
    deadline = time.monotonic() + within_s
    ended = 0
    while time.monotonic() < deadline:
        ended = log.read_text(errors="replace").count(SUPERSEDED)
        if ended >= attempts:
            break
        await asyncio.sleep(0.5)
    return ended


async def measure(helper_count: int, replica_count: int, step_ms: int, postgres: str) -> list[str]:
    data = Path(tempfile.mkdtemp(prefix="helper-failover-"))
    async with fresh_postgres_database(postgres) as database, running_replicas(data, database, replica_count) as up:
        stack, store, temporal = up.stack, up.store, up.temporal
        # A session makes the most steps a helper's turn may (its ceiling would end it), a step every
        # `step_ms`: at the defaults, four minutes, longer than the three stops take.
        task = scripted_task(
            "Watch the shared inbox and note what changes.",
            steps=TURN_MAX_STEPS_HELPER - 1,
            step_ms=step_ms,
            input_tokens=100,
            input_growth=0,
            output_tokens=20,  # far from the work ceiling
        )
        helpers = [
            Helper(f"owner-{number // HELPERS_PER_OWNER}", f"watch-{number % HELPERS_PER_OWNER}")
            for number in range(helper_count)
        ]
        await admit(up, helpers, task)
        await until_followed(up, helpers, within_s=120)
        sessions = {h: (await store.get(h.owner, h.helper_id)) for h in helpers}

        lines = [
            f"-- {len(helpers)} running helpers on {replica_count} replicas, PostgreSQL, a step every {step_ms} ms, "
            "follows without heartbeats"
        ]
        frozen = await stop_one(stack, temporal, store, helpers, how="SIGSTOP", give_up_s=GIVE_UP_S)
        lines += report(frozen, step_ms / 1000, "within 30 s")
        await until_followed(up, helpers, within_s=GIVE_UP_S)
        graceful = await stop_one(stack, temporal, store, helpers, how="SIGTERM", give_up_s=GIVE_UP_S)
        lines += report(graceful, step_ms / 1000, "within a few seconds")
        await until_followed(up, helpers, within_s=GIVE_UP_S)
        killed = await stop_one(stack, temporal, store, helpers, how="SIGKILL", give_up_s=GIVE_UP_S)
        lines += report(killed, step_ms / 1000, "p99 ≤ 15 s")

        rows = {h: await store.get(h.owner, h.helper_id) for h in helpers}
        new_session = sum(
            1
            for h, row in rows.items()
            if row is None or (before := sessions[h]) is None or row.session_id != before.session_id
        )
        ended = Counter("gone" if row is None else str(row.outcome_kind) for row in rows.values())
        ended.pop("None", None)
        lines.append(
            f"  afterwards: {new_session} helpers with another session, ended {dict(ended) or 0} (a step every "
            f"{step_ms} ms outlasts the bench: 0 and 0 expected)"
        )
        return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.failover", description=__doc__)
    parser.add_argument("--helpers", type=int, default=24)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--step-ms", type=int, default=3000)
    parser.add_argument("--postgres", metavar="URL", default=POSTGRES_URL)
    arguments = parser.parse_args()
    if arguments.replicas < 2:
        parser.error("--replicas: at least 2, so that a stopped replica's follows have somewhere to go")
    lines = asyncio.run(measure(arguments.helpers, arguments.replicas, arguments.step_ms, arguments.postgres))
    for line in lines:
        print(line, flush=True)
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
