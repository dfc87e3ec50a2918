"""One owner floods while a hundred others admit one helper each: their time to running, fairness off and on.

    .venv/bin/python -m tools.bench.fairness [--owners 100] [--flood 400] [--postgres URL]

Twice in one run, each time on a stack of its own (tools.bench.common.process_stack: `python worker.py`, the
reference core, a dev server, the store on a fresh PostgreSQL database): once on a dev server started plainly,
once on one started with `--dynamic-config-value matching.enableFairness=true` (task queue fairness: the server
hands out queued tasks in turn by their fairness key, which the helpers' workflows set to their owner). The
worker is saturated on purpose: a few activity slots, a few follow slots, a few workflow task slots
(HELPER_MAX_CONCURRENT_*; a worker that does not read one of these ignores it, and the bench says which it read).

The flood: one owner starts `--flood` Goal checks at once (each a workflow, an activity and an admission to the
owner's coordinator) and admits helpers of its own at `--flood-rate` a second from 20 callers (refused beyond its
three open places, each a coordinator task all the same) while the others are measured. One second later each of
`--owners` other owners admits one helper (`HelperClient.start`, all at the same moment); its time to running
is from that call to its row showing `running` (the session opened), read from the store every 20 ms. Every
helper's session takes two short steps, so slots keep turning over.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

from sqlalchemy import text
from temporalio.common import Priority
from temporalio.service import RPCError

import config.settings
from domain.goals import Goal
from domain.requests import HelperRequest
from protocol.errors import StarterError
from protocol.names import GOAL_CHECK_WORKFLOW
from reference.core.script import scripted_task
from tools.bench.common import ProcessStack, describe, process_stack, repository_root

FAIRNESS = ("--dynamic-config-value", "matching.enableFairness=true")
# Few slots, so tasks queue on the server, where fairness decides their order.
SATURATED = {
    "HELPER_MAX_CONCURRENT_ACTIVITIES": "4",
    "HELPER_MAX_CONCURRENT_FOLLOWS": "4",
    "HELPER_MAX_CONCURRENT_WORKFLOW_TASKS": "2",
    "HELPER_MAX_CONCURRENT_LOCAL_ACTIVITIES": "4",
}
QUICK_TASK = scripted_task("Check the calendar for clashes.", steps=2, step_ms=300)
FLOOD_OWNER = "flood"
FLOOD_LANES = 20
LEAD_S = 1.0  # the flood's head start
RUNNING_WITHIN_S = 180.0  # an owner whose helper is not running by then counts as never


@dataclass
class Outcome:
    mode: str
    times_ms: list[float] = field(default_factory=list)
    never: int = 0
    start_failures: dict[str, int] = field(default_factory=dict)
    flood_calls: int = 0
    flood_goal_checks: int = 0
    refused: str | None = None  # why this mode could not run
    seconds: float = 1.0  # how long the flood ran


async def flood(stack: ProcessStack, goal_checks: int, rate: float, stop: asyncio.Event, outcome: Outcome) -> None:
    """Goal checks at once, and admissions of the flooding owner at `rate` a second (from several callers) until
    `stop`."""
    goal = Goal(owner=FLOOD_OWNER, goal_id="inbox", task=QUICK_TASK, model="scripted", every_ms=3_600_000)
    temporal = stack.client.temporal

    async def goal_check(number: int) -> None:
        await temporal.start_workflow(
            GOAL_CHECK_WORKFLOW, goal, id=f"flood-check-{number}", task_queue=stack.settings.task_queue
        )
        outcome.flood_goal_checks += 1

    async def admitting(lane: int) -> None:
        number = 0
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not stop.is_set():
            # Paced, so both modes meet the same flood unless the stack cannot answer that fast.
            next_at += FLOOD_LANES / rate
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            number += 1
            request = HelperRequest(owner=FLOOD_OWNER, helper_id=f"f{lane}-{number}", task=QUICK_TASK, model="scripted")
            with contextlib.suppress(StarterError, RPCError):  # refused (three open) or unanswered: it goes on
                await stack.client.start(request)
            outcome.flood_calls += 1

    lanes = [asyncio.create_task(admitting(lane)) for lane in range(FLOOD_LANES)]
    await asyncio.gather(*(goal_check(number) for number in range(goal_checks)), return_exceptions=True)
    await asyncio.gather(*lanes)


async def running_since(stack: ProcessStack, helper_id: str, owners: set[str]) -> dict[str, float]:
    """When each owner's helper was first seen past `waiting` (monotonic), polling the store."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + RUNNING_WITHIN_S
    statement = text("SELECT owner FROM helper_rows WHERE helper_id = :helper_id AND state <> 'waiting'")
    while len(seen) < len(owners) and time.monotonic() < deadline:
        async with stack.store.engine.connect() as connection:
            found = (await connection.execute(statement, {"helper_id": helper_id})).scalars().all()
        now = time.monotonic()
        for owner in found:
            if owner in owners:
                seen.setdefault(owner, now)
        await asyncio.sleep(0.02)
    return seen


async def measure(
    mode: str, server_args: tuple[str, ...], owners: int, goal_checks: int, rate: float, postgres: str
) -> Outcome:
    outcome = Outcome(mode)
    try:
        async with process_stack(postgres, SATURATED, server_args) as stack:
            tag = uuid.uuid4().hex[:6]
            names = [f"fair-{tag}-{number}" for number in range(owners)]
            helper_id = "first"
            stop = asyncio.Event()
            flood_from = time.monotonic()
            flooding = asyncio.create_task(flood(stack, goal_checks, rate, stop, outcome))
            await asyncio.sleep(LEAD_S)
            watching = asyncio.create_task(running_since(stack, helper_id, set(names)))
            started: dict[str, float] = {}

            async def admit(owner: str) -> None:
                started[owner] = time.monotonic()
                request = HelperRequest(owner=owner, helper_id=helper_id, task=QUICK_TASK, model="scripted")
                try:
                    await stack.client.start(request)
                except (StarterError, RPCError) as error:
                    kind = type(error).__name__
                    outcome.start_failures[kind] = outcome.start_failures.get(kind, 0) + 1

            await asyncio.gather(*(admit(owner) for owner in names))
            seen = await watching
            stop.set()
            await flooding
            outcome.seconds = time.monotonic() - flood_from
            outcome.times_ms = [(seen[owner] - started[owner]) * 1000 for owner in names if owner in seen]
            outcome.never = owners - len(outcome.times_ms)
            # An owner never seen running counts as the bound, so the percentiles stay figures (then "≥").
            outcome.times_ms += [RUNNING_WITHIN_S * 1000] * outcome.never
    except RuntimeError as error:
        if not server_args:
            raise
        outcome.refused = str(error)
    return outcome


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def read_settings() -> str:
    """Which of the saturating variables this build's settings read (an unknown variable is ignored)."""
    source = inspect.getsource(config.settings)
    read = {name: "read" if name in source else "not read" for name in SATURATED}
    return ", ".join(f"{name}={value} ({read[name]})" for name, value in SATURATED.items())


def fairness_keys() -> str:
    """Whether the SDK offers fairness keys, and where this build sets them: without keys, fairness has nothing to
    share out and both modes should measure alike."""
    offered = "fairness_key" in inspect.signature(Priority).parameters
    root = repository_root()
    setting = sorted(
        str(path.relative_to(root))
        for folder in ("workflows", "protocol", "activities", "starter")
        for path in (root / folder).rglob("*.py")
        if "fairness_key" in path.read_text()
    )
    where = ", ".join(setting) or "no file"
    return f"SDK Priority(fairness_key=...): {'offered' if offered else 'absent'}; this build sets it in {where}"


async def run(owners: int, goal_checks: int, rate: float, postgres: str) -> None:
    asyncio.get_running_loop().set_exception_handler(quiet_unretrieved)
    print(f"worker: {read_settings()}", flush=True)
    print(fairness_keys(), flush=True)
    off = await measure("fairness off", (), owners, goal_checks, rate, postgres)
    on = await measure("fairness on", FAIRNESS, owners, goal_checks, rate, postgres)
    for outcome in (off, on):
        if outcome.refused is not None:
            print(f"{outcome.mode}: the dev server refused {' '.join(FAIRNESS)}: {outcome.refused}")
            continue
        name = f"{outcome.mode}: {owners} owners' admission -> row running"
        print(describe(name, outcome.times_ms))
        print(
            f"  not running within {RUNNING_WITHIN_S:.0f} s: {outcome.never}; admissions that failed: "
            f"{outcome.start_failures or 'none'}; the flood: {outcome.flood_goal_checks} Goal checks started, "
            f"{outcome.flood_calls} admissions asked ({outcome.flood_calls / outcome.seconds:.1f} /s)",
            flush=True,
        )
    on_p99 = percentile(on.times_ms, 0.99) if on.refused is None else float("nan")
    off_p99 = percentile(off.times_ms, 0.99)
    on_p50 = percentile(on.times_ms, 0.5) if on.refused is None else float("nan")
    off_p50 = percentile(off.times_ms, 0.5)
    print(
        f"time to running under one owner's flood, p99: project (fairness on) {at_least(on)}{on_p99:.0f} ms | "
        f"baseline (fairness off) {at_least(off)}{off_p99:.0f} ms | ratio x{on_p99 / off_p99:.2f}; p50 "
        f"{on_p50:.0f} / {off_p50:.0f} ms",
        flush=True,
    )
    if unretrieved[0]:
        print(
            f"({unretrieved[0]} update-with-start failures of the flood were left unretrieved in the SDK's start "
            "operation and not printed)"
        )


def at_least(outcome: Outcome) -> str:
    return "≥ " if outcome.never else ""


# The SDK sets an update-with-start's failure on its start operation too; nobody awaits that, so asyncio would
# print each of the flood's refusals as "Future exception was never retrieved".
unretrieved = [0]


def quiet_unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    if isinstance(context.get("exception"), RPCError) and "never retrieved" in str(context.get("message")):
        unretrieved[0] += 1
        return
    loop.default_exception_handler(context)


def main() -> None:
    from tools.bench.__main__ import POSTGRES_URL

    parser = argparse.ArgumentParser(prog="python -m tools.bench.fairness", description=__doc__)
    parser.add_argument("--owners", type=int, default=100, help="owners admitting one helper each, measured")
    parser.add_argument("--flood", type=int, default=400, help="Goal checks the flooding owner starts at once")
    parser.add_argument("--flood-rate", type=float, default=40, help="the flooding owner's admissions a second")
    parser.add_argument("--postgres", default=POSTGRES_URL, metavar="URL", help="a PostgreSQL server (fresh database)")
    arguments = parser.parse_args()
    asyncio.run(run(arguments.owners, arguments.flood, arguments.flood_rate, arguments.postgres))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
