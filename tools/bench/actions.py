"""What one helper costs in billable Temporal actions, per way it ends (R57), from the dev server's own counter.

    .venv/bin/python -m tools.bench.actions [--minutes 3] [--paths partial,completed,question,authorization,closed]

Temporal Cloud bills actions: workflow starts, activities and their retries, heartbeats that reach the server,
timers, signals, updates, search-attribute upserts, local-activity markers. The dev server counts them in its
Prometheus `action` counter (`--metrics-port`), by `action_type`. Each path runs one helper at a time, with the
deployment's defaults (long polls of 20 s, 25-minute follow windows) against a core
that offers long poll and does nothing until the path's end: the worst case for heartbeats. The helper's
deadline is `--minutes`; the `partial` path lasts the whole deadline, the others end halfway. Each count runs
from the admission to the owner's turn that reads and delivers the outcome, so it holds everything a helper
causes: the coordinator's update, signals and timers, the helper's activities, heartbeats and markers, the chat
offer.

A follow sends no heartbeat while the core answers (R57), so only its retries grow with time, one per follow
window (25 minutes): the line `per 45 minutes` adds, to what the `partial` path measured, the retries of a
45-minute follow beyond those it made. `--minutes 45` measures it directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from contracts.core_api import Authorization, SessionStatus
from domain.limits import FollowTuning, Limits, Policy
from domain.requests import HelperRequest
from protocol.names import HELPER_OUTCOME, HELPER_OWNER, HELPER_STATE, helper_workflow_id
from reference.chat.server import running_chat
from starter.client import HelperClient
from starter.inputs import delivered_request, read_request
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore, FakeSession, serving_fake_core
from tools.bench.common import BIN, free_port
from worker import running_worker

OWNER = "bench"
PATHS = ("partial", "completed", "question", "authorization", "closed")
TARGET = 24
_ACTION_LINE = re.compile(r"^action\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def read_actions(http: httpx.AsyncClient, metrics_url: str) -> Counter[str]:
    """The dev server's `action` counter for the `default` namespace, by action type."""
    text = (await http.get(metrics_url)).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _ACTION_LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.get("namespace") == "default":
            counts[labels.get("action_type", "?")] += round(float(match["value"]))
    return counts


@dataclass
class ActionStack:
    env: WorkflowEnvironment
    client: HelperClient
    store: HelperStore
    core: FakeCore
    metrics_url: str
    http: httpx.AsyncClient


@contextlib.asynccontextmanager
async def action_stack(deadline_minutes: float) -> AsyncIterator[ActionStack]:
    metrics_port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(BIN / "temporal"),
            data_converter=pydantic_data_converter,
            search_attributes=[HELPER_OWNER, HELPER_STATE, HELPER_OUTCOME],
            dev_server_log_level="error",
            dev_server_extra_args=["--metrics-port", str(metrics_port)],
        )
        core = FakeCore(long_poll="honest", on_finish="partial")
        try:
            async with serving_fake_core(core) as core_url, running_chat() as chat_url:
                settings = Settings(
                    store=f"sqlite+aiosqlite:///{Path(scratch) / 'helpers.sqlite3'}",
                    results_dir=Path(scratch) / "results",
                    core_url=core_url,
                    chat_url=chat_url,
                    task_queue="bench-actions",
                    # The deployment's defaults but the deadline (and a grace it fits in).
                    policy=Policy(
                        limits=Limits(deadline_ms=round(deadline_minutes * 60_000)),
                        follow=FollowTuning(),
                    ),
                )
                store = await HelperStore.connect(settings.store, run_migrations=True)
                async with running_worker(env.client, settings), httpx.AsyncClient() as http:
                    yield ActionStack(
                        env,
                        HelperClient(settings, store.reads, env.client),
                        store,
                        core,
                        f"http://127.0.0.1:{metrics_port}/metrics",
                        http,
                    )
                await store.close()
        finally:
            await env.shutdown()


async def _until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = condition() if callable(condition) else condition
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def _workflow_closed(stack: ActionStack, helper_id: str) -> bool:
    description = await stack.env.client.get_workflow_handle(helper_workflow_id(OWNER, helper_id)).describe()
    return description.status is not None and description.status.name != "RUNNING"


async def run_path(
    stack: ActionStack, path: str, deadline_minutes: float, number: int
) -> tuple[Counter[str], float, int]:
    """One helper through `path`; the actions from its admission to the turn that delivered its outcome."""
    helper_id = f"{path}-{number}"
    before = await read_actions(stack.http, stack.metrics_url)
    started = time.monotonic()
    await stack.client.start(HelperRequest(owner=OWNER, helper_id=helper_id, task=f"Bench {path}.", model="scripted"))
    await _until(lambda: stack.core.session_of(helper_id) is not None, 60, "the session")
    session = stack.core.session_of(helper_id)
    assert session is not None
    session.add_step(2_000, 300, "Looked at the first thing.")
    if path != "partial":
        await asyncio.sleep(deadline_minutes * 60 / 2)
        _end(stack, session, path, helper_id)
        if path == "closed":
            await stack.client.close(OWNER, helper_id)
    await _until(lambda: _workflow_closed(stack, helper_id), deadline_minutes * 60 + 300, "the helper's end")
    lasted = time.monotonic() - started
    if path != "closed":
        turn = f"turn-{helper_id}"
        await stack.client.read(read_request(OWNER, turn, [helper_id]))
        await stack.client.delivered(delivered_request(OWNER, turn, 200))
    await asyncio.sleep(5)  # the chat offer and the coordinator's answers settle
    after = await read_actions(stack.http, stack.metrics_url)
    return after - before, lasted, stack.core.reads_by_session.get(session.session_id, 0)


def _per_45_minutes(total: int, lasted_s: float) -> tuple[int, int]:
    """A 45-minute helper: the actions measured plus the follow retries a 45-minute follow adds (one per window
    beyond those measured). A follow sends no heartbeat while the core answers, so nothing else grows with time."""
    window_s = FollowTuning().window_ms / 1000
    retries = math.ceil(45 * 60 / window_s) - math.ceil(lasted_s / window_s)
    return total + retries, retries


def _end(stack: ActionStack, session: FakeSession, path: str, helper_id: str) -> None:
    match path:
        case "completed":
            session.end(SessionStatus.COMPLETED, "Found it.")
        case "question":
            session.status = SessionStatus.QUESTION
            session.question = "Which quarter?"
        case "authorization":
            session.status = SessionStatus.AUTHORIZATION
            session.authorization = Authorization(action="pay invoice 1044")
        case "closed":
            pass  # the owner closes it; the fake core stops on the cancel


async def main(minutes: float, paths: list[str]) -> int:
    async with action_stack(minutes) as stack:
        # The owner's coordinator exists before the first count: its start is the owner's, not a helper's.
        await stack.client.start(HelperRequest(owner=OWNER, helper_id="warm-up", task="Warm up.", model="scripted"))
        await stack.client.close(OWNER, "warm-up")
        await asyncio.sleep(3)
        worst = 0
        for number, path in enumerate(paths):
            counts, lasted, reads = await run_path(stack, path, minutes, number)
            total = sum(counts.values())
            heartbeats = counts.get("grpc_RecordActivityTaskHeartbeat", 0)
            projected, retries = _per_45_minutes(total, lasted)
            worst = max(worst, projected if path == "partial" else total)
            kinds = ", ".join(
                f"{kind.removeprefix('grpc_').removeprefix('command_')} {n}" for kind, n in counts.most_common()
            )
            print(f"{path}: {total} actions in {lasted / 60:.1f} min ({kinds})")
            if path == "partial":
                per_minute = reads / (lasted / 60)
                polled = 60_000 / FollowTuning().poll_ms
                print(
                    f"core reads per running helper a minute: project {per_minute:.1f} | baseline (polled every "
                    f"{FollowTuning().poll_ms} ms, 60,000 / HELPER_POLL_MS) {polled:.0f} | ratio "
                    f"x{per_minute / polled:.3f}  (target <= 6 a minute)"
                )
                print(
                    f"  per 45 minutes: {projected} actions (heartbeats {heartbeats}, follow retries {retries} more "
                    f"than measured, the rest fixed)  target <= {TARGET}"
                )
        print(f"billable actions per 45-minute helper: project {worst} | target {TARGET} | ratio x{worst / TARGET:.2f}")
        return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3.0, help="the helper's deadline (default 3)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    arguments = parser.parse_args()
    chosen = [path.strip() for path in arguments.paths.split(",") if path.strip()]
    unknown = sorted(set(chosen) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths: {', '.join(unknown)}")
    raise SystemExit(asyncio.run(main(arguments.minutes, chosen)))
