"""Three worker replicas on one PostgreSQL store, as a Deployment of three pods runs them (R46): one replica is
SIGKILLed and another stopped with SIGTERM while helpers run; the follows they held go on in the survivor from
their rows, and every helper ends once, with one core session, never more than three running per owner."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from domain.limits import FollowTuning, Policy
from domain.outcome import OutcomeKind
from domain.rows import RowState
from reference.core.script import scripted_task
from starter.client import HelperClient
from tests.conftest import POSTGRES_URL
from tests.helpers import eventually, free_stack_ports, fresh_postgres_database, helper_request, start_asking_again
from tools.demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

OWNERS = ("ines", "jonas")
HELPERS = ("h1", "h2", "h3")
# The worker's GRACEFUL_SHUTDOWN is 15 s; Kubernetes' terminationGracePeriodSeconds (30 s) is the outer bound.
TERMINATION_GRACE_S = 30.0
FOLLOWING = re.compile(r"following (\S+)/(\S+) \(attempt (\d+)\)")


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[Stack]:
    async with fresh_postgres_database(POSTGRES_URL) as store_url:
        stack = Stack(
            tmp_path / "data",
            free_stack_ports(),
            workers=3,
            store_url=store_url,
        )
        try:
            await stack.start(fresh=True)
            yield stack
        finally:
            stack.stop()


def follows_in_log(stack: Stack, name: str) -> list[tuple[str, int]]:
    """`owner/helper` and attempt of each follow attempt in a replica's log."""
    text = (stack.logs / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    return [(f"{m[1]}/{m[2]}", int(m[3])) for m in FOLLOWING.finditer(text)]


async def test_follows_of_a_killed_and_a_stopped_replica_go_on_in_the_survivor(replicas: Stack) -> None:
    stack = replicas
    # A SIGKILLed replica's follows are handed on once the survivor finds its liveness record silent.
    policy = Policy(check_ms=1_000, follow=FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200))
    client = await HelperClient.connect(stack.settings(policy=policy))
    helpers = [f"{owner}/{helper_id}" for owner in OWNERS for helper_id in HELPERS]
    try:
        for owner in OWNERS:
            for helper_id in HELPERS:
                task = scripted_task(f"Task {helper_id} of {owner}.", steps=30, step_ms=700)
                await start_asking_again(client, helper_request(owner, helper_id, task))

        async def all_followed() -> dict[str, str] | None:
            followers = {helper: name for name in stack.worker_names for helper, _ in follows_in_log(stack, name)}
            return followers if set(followers) == set(helpers) else None

        followers = await eventually(all_followed, timeout=60)

        async def rows_show_followed() -> bool:
            # A follow logs its start just before it writes it to the row.
            rows = [view for owner in OWNERS for view in await client.list_helpers(owner)]
            return all(view.follow_started_at is not None for view in rows)

        await eventually(rows_show_followed, timeout=30)

        # The replica that follows the most dies at once; then the next is stopped as Kubernetes stops a pod.
        by_replica = Counter(followers.values())
        killed = by_replica.most_common()[0][0]
        stopped = next(name for name in stack.worker_names if name != killed)
        survivor = next(name for name in stack.worker_names if name not in (killed, stopped))
        stack.kill(killed)
        process = dict(stack.processes)[stopped]
        seconds = await stack.terminate(stopped, TERMINATION_GRACE_S)
        assert process.returncode == 0, f"{stopped} did not exit by itself within {seconds:.1f} s of SIGTERM"

        handed_on = {helper for helper, name in followers.items() if name in (killed, stopped)}
        assert handed_on, followers

        async def all_final() -> dict[str, OutcomeKind | None] | None:
            outcomes = {
                f"{owner}/{view.helper_id}": view.outcome_kind
                for owner in OWNERS
                for view in await client.list_helpers(owner)
            }
            return outcomes if len(outcomes) == len(helpers) and None not in outcomes.values() else None

        done = await eventually(all_final, timeout=180, interval=0.5)
        running = [view for owner in OWNERS for view in await client.list_helpers(owner, [RowState.RUNNING])]
    finally:
        await client.aclose()

    assert done == dict.fromkeys(helpers, OutcomeKind.COMPLETED)
    assert running == []
    resumed = {helper for helper, attempt in follows_in_log(stack, survivor) if attempt > 1}
    assert handed_on <= resumed, f"followed by {followers}; resumed by {survivor}: {sorted(resumed)}"
    with sqlite3.connect(stack.data / "core.sqlite3") as core_db:
        sessions = core_db.execute("SELECT owner, helper_id, COUNT(*) FROM sessions GROUP BY owner, helper_id")
        per_helper = {f"{owner}/{helper_id}": count for owner, helper_id, count in sessions.fetchall()}
    assert per_helper == dict.fromkeys(helpers, 1)  # one create per key: no session created twice
