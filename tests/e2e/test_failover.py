"""R46, the liveness bound: a replica that dies (SIGKILL) while it follows running helpers has their follows
started again on the other replica within seconds, long before the follow's heartbeat timeout (110 s at the
defaults, which this test keeps) would reveal it; each helper keeps its one session and goes on running.
A replica frozen past the bound is taken over the same way, and does no harm when it runs again. Two replicas
(`python worker.py` each) on a PostgreSQL database of the machine's server, as deployed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from config.settings import Settings
from domain.requests import HelperRequest
from protocol.connection import connect_for
from reference.core.script import scripted_task
from starter.client import HelperClient
from store.helper_store import HelperStore
from tests.conftest import POSTGRES_URL
from tests.helpers import eventually, free_port, free_stack_ports, fresh_postgres_database
from tools.bench.failover import Helper, followers, steps_of, stop_one
from tools.demo.stack import HOST, Stack, wait_for_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.postgres]

# Well inside the follow's 110 s heartbeat timeout: the bound the docs state, and a margin for a loaded machine.
REPORTS_AGAIN_WITHIN_S = 20.0
# A freeze past the liveness bound (8 s) and the restart of the frozen replica's follows, then time to go on.
FROZEN_S = 16.0
THAWED_S = 15.0


async def test_a_killed_replicas_helpers_report_progress_again_within_seconds(tmp_path: Path) -> None:
    async with fresh_postgres_database(POSTGRES_URL) as database:
        stack = Stack(
            tmp_path / "data",
            free_stack_ports(),
            workers=2,
            store_url=database,
            worker_health_ports=(free_port(), free_port()),
        )
        store: HelperStore | None = None
        try:
            await stack.start(fresh=True)
            for name, port in zip(stack.worker_names, stack.worker_health_ports, strict=True):
                await wait_for_http(name, f"http://{HOST}:{port}/livez", stack, timeout=60)
            settings = Settings.from_env(stack.environment())
            assert settings.policy.follow.liveness_ms >= 60_000, "the default heartbeat timeout, not a short one"
            store = opened = await HelperStore.connect(database)
            temporal = await connect_for(settings)
            client = HelperClient(settings, store.reads, temporal)
            task = scripted_task("Watch the inbox.", steps=70, step_ms=1_000, input_growth=0, output_tokens=20)
            helpers = [Helper(f"owner-{n // 3}", f"watch-{n % 3}") for n in range(6)]
            for helper in helpers:
                await client.start(
                    HelperRequest(owner=helper.owner, helper_id=helper.helper_id, task=task, model="scripted")
                )

            async def all_followed() -> bool:
                stepped = min((await steps_of(opened, helpers)).values()) >= 1
                return stepped and len(await followers(temporal, stack, helpers)) == len(helpers)

            await eventually(all_followed, timeout=60, interval=0.5)
            before = {h: await store.get(h.owner, h.helper_id) for h in helpers}

            killed = await stop_one(stack, temporal, store, helpers, kill=True, give_up_s=REPORTS_AGAIN_WITHIN_S)

            assert killed.followed, "the killed replica followed some helpers"
            late = {h.helper_id: killed.seconds[h] for h in killed.followed if killed.seconds[h] is None}
            assert not late, f"no new step within {REPORTS_AGAIN_WITHIN_S} s of the kill: {late}"
            for helper in helpers:
                row = await store.get(helper.owner, helper.helper_id)
                earlier = before[helper]
                assert row is not None and earlier is not None
                assert row.session_id == earlier.session_id, "one session per helper"
                assert row.outcome_kind is None, "still running"
            # The survivor follows every helper now.
            survivor = {name for name in stack.worker_names if name != killed.replica}
            assert set((await followers(temporal, stack, helpers)).values()) <= survivor
        finally:
            if store is not None:
                await store.close()
            stack.stop()


async def test_a_replica_stalled_past_the_bound_is_taken_over_without_harm(tmp_path: Path) -> None:
    """R46: a replica frozen for longer than the liveness bound (SIGSTOP, as a node starved of CPU) is taken for
    dead and its attempts ended, while its own code still holds them; once it runs again (SIGCONT), two follows of
    one helper do no harm: every helper keeps its one session, goes on running and reporting, and its row's steps
    never go back. (A frozen process keeps its polls open, so the server may hand it the next attempt too: unlike
    a killed one's, its helpers are not sure to move while it is frozen.)"""
    async with fresh_postgres_database(POSTGRES_URL) as database:
        stack = Stack(
            tmp_path / "data",
            free_stack_ports(),
            workers=2,
            store_url=database,
            worker_health_ports=(free_port(), free_port()),
        )
        store: HelperStore | None = None
        try:
            await stack.start(fresh=True)
            for name, port in zip(stack.worker_names, stack.worker_health_ports, strict=True):
                await wait_for_http(name, f"http://{HOST}:{port}/livez", stack, timeout=60)
            settings = Settings.from_env(stack.environment())
            store = opened = await HelperStore.connect(database)
            temporal = await connect_for(settings)
            client = HelperClient(settings, store.reads, temporal)
            task = scripted_task("Watch the inbox.", steps=70, step_ms=1_000, input_growth=0, output_tokens=20)
            helpers = [Helper("owner-0", f"watch-{n}") for n in range(3)]
            for helper in helpers:
                request = HelperRequest(owner=helper.owner, helper_id=helper.helper_id, task=task, model="scripted")
                await client.start(request)

            async def all_followed() -> bool:
                stepped = min((await steps_of(opened, helpers)).values()) >= 1
                return stepped and len(await followers(temporal, stack, helpers)) == len(helpers)

            await eventually(all_followed, timeout=60, interval=0.5)
            before = {h: await store.get(h.owner, h.helper_id) for h in helpers}
            following = await followers(temporal, stack, helpers)
            frozen = Counter(following.values()).most_common(1)[0][0]
            theirs = [h for h in helpers if following[h] == frozen]
            seen: dict[Helper, list[int]] = {h: [] for h in helpers}

            async def sample(seconds: float) -> None:
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    for helper, steps in (await steps_of(opened, helpers)).items():
                        seen[helper].append(steps)
                    await asyncio.sleep(0.2)

            await sample(1)
            at_freeze = await steps_of(opened, helpers)
            os.kill(stack.pid(frozen), signal.SIGSTOP)
            try:
                await sample(FROZEN_S)
            finally:
                os.kill(stack.pid(frozen), signal.SIGCONT)
            await sample(THAWED_S)  # the thawed replica's attempts learn they are over, or go on
            assert theirs, "the frozen replica followed some helpers"

            for helper in helpers:
                assert seen[helper] == sorted(seen[helper]), f"{helper.helper_id}'s steps went back: {seen[helper]}"
                row = await store.get(helper.owner, helper.helper_id)
                earlier = before[helper]
                assert row is not None and earlier is not None
                assert row.session_id == earlier.session_id, "one session per helper"
                assert row.outcome_kind is None, "still running"
                assert row.steps > at_freeze[helper], "reporting again"
            stack.check_alive()  # the thawed replica runs on
        finally:
            if store is not None:
                await store.close()
            stack.stop()
