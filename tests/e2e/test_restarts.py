"""Restarts lose nothing (R25): the worker killed mid-helper, and the Temporal server killed and restarted
on its SQLite file. Every part runs as its own process here, exactly as in `make run`."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from domain.limits import FollowTuning, Policy
from domain.messages.updates import AnswerRequest
from domain.outcome import OutcomeKind
from domain.rows import RowState
from protocol.errors import Unavailable
from reference.core.script import scripted_task
from starter.client import HelperClient
from starter.inputs import answer_request, delivered_request, read_request
from tests.helpers import eventually, free_stack_ports, helper_request, start_asking_again
from tools.demo.stack import Stack

pytestmark = pytest.mark.e2e

HELPERS = [f"h{n}" for n in range(1, 6)]


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[Stack]:
    stack = Stack(tmp_path / "data", free_stack_ports())
    try:
        await stack.start(fresh=True)
        yield stack
    finally:
        stack.stop()


class SlotWatch:
    """Samples the store while helpers run: the most rows ever running at once."""

    def __init__(self, client: HelperClient, owner: str) -> None:
        self.client, self.owner, self.most = client, owner, 0
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            running = await self.client.list_helpers(self.owner, [RowState.RUNNING])
            self.most = max(self.most, len(running))
            await asyncio.sleep(0.05)

    async def stop(self) -> int:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.most


async def _run_through(stack: Stack, crash: str) -> None:
    # Five open helpers, three slots: two wait.
    policy = Policy(max_open=5, check_ms=1_000, follow=FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200))
    client = await HelperClient.connect(stack.settings(policy=policy))
    owner = "rita"
    try:
        for helper_id in HELPERS:
            task = scripted_task(f"Task {helper_id}.", steps=8, step_ms=700)
            await start_asking_again(client, helper_request(owner, helper_id, task))
        watch = SlotWatch(client, owner)
        await eventually(lambda: _any_steps(client, owner), timeout=30)
        stack.kill(crash)
        await asyncio.sleep(2)
        await stack.respawn(crash)
        done = await eventually(lambda: _all_final(client, owner), timeout=120, interval=0.2)
        most_running = await watch.stop()
    finally:
        await client.aclose()
    assert {row.helper_id: row.outcome_kind for row in done} == dict.fromkeys(HELPERS, OutcomeKind.COMPLETED)
    assert most_running <= 3
    with sqlite3.connect(stack.data / "core.sqlite3") as core_db:
        per_helper = dict(core_db.execute("SELECT helper_id, COUNT(*) FROM sessions GROUP BY helper_id").fetchall())
    assert per_helper == dict.fromkeys(HELPERS, 1)  # one create per key: no session created twice


async def _any_steps(client: HelperClient, owner: str) -> bool:
    return any(view.steps >= 1 for view in await client.list_helpers(owner))


async def _all_final(client: HelperClient, owner: str):
    views = await client.list_helpers(owner)
    return views if len(views) == len(HELPERS) and all(v.outcome_kind is not None for v in views) else None


async def test_worker_killed_mid_helper_loses_nothing(processes: Stack):
    """R25, R9, R6: the worker is SIGKILLed while helpers run and two wait; after it restarts every helper
    completes, the core saw exactly one session per helper, and never more than three ran at once."""
    await _run_through(processes, "worker")


async def test_temporal_server_killed_and_restarted_on_its_file_loses_nothing(processes: Stack):
    """R25: the Temporal dev server is SIGKILLed mid-run and restarted on the same SQLite file; the worker
    reconnects, timers and activities go on, and every helper completes once."""
    await _run_through(processes, "temporal")


async def test_a_wait_stays_in_the_owners_inbox_across_a_restart_and_its_answer_takes_it_out(processes: Stack):
    """R56: the inbox is read from the store. With the worker and the Temporal server killed between the question
    and its answer, the wait is still listed, with what it asks and its bound; after both restart, the answer is
    taken and the wait leaves the inbox for its record."""
    client = await HelperClient.connect(processes.settings())
    owner = "rita"
    task = scripted_task("Plan.", steps=1, step_ms=20, end="question", question="Where?", options=[("walk", "Walk")])
    try:
        await start_asking_again(client, helper_request(owner, "trip", task))
        await eventually(lambda: _unreported(client, owner, "trip"), timeout=30)
        await client.read(read_request(owner, "t-1", ["trip"]))
        await client.delivered(delivered_request(owner, "t-1", answer_chars=40))
        [before] = await client.waits(owner)
        processes.kill("worker")
        processes.kill("temporal")
        assert await client.waits(owner) == [before]  # nothing runs but the store
        await processes.respawn("temporal")
        await processes.respawn("worker")
        assert before.helper_id == "trip" and before.text and before.expires_at is not None
        answer = answer_request(owner, "trip", before.question_id, option_id="walk")
        await eventually(lambda: _answered(client, answer), timeout=60, interval=0.5)
        assert await client.waits(owner) == []
        [record] = await client.store.wait_records(owner)
        assert (record.helper_id, record.ended.value) == ("trip", "answered")
    finally:
        await client.aclose()


async def _unreported(client: HelperClient, owner: str, helper_id: str) -> bool:
    return helper_id in [view.helper_id for view in await client.unreported(owner)]


async def _answered(client: HelperClient, answer: AnswerRequest) -> bool:
    """An answer sent until the restarted runtime takes it: refused as unavailable meanwhile, nothing taken."""
    try:
        await client.answer(answer)
    except Unavailable:
        return False
    return True


@pytest.mark.slow
async def test_a_worker_killed_in_a_grants_follow_up_performs_the_grant_once(processes: Stack):
    """R55, R25: asked to mail Bob and Carol, the owner grants Carol; the worker is SIGKILLed as soon as the follow-up
    has its session, during its first step. After it restarts, the follow-up completes with one session, one use of
    the grant and one mail, to Carol."""
    policy = Policy(check_ms=1_000, follow=FollowTuning(poll_ms=100, window_ms=5_000, resume_ms=200))
    client = await HelperClient.connect(processes.settings(policy=policy))
    owner, asked = "rita", "send_mail to bob@example.com, carol@example.com"
    task = scripted_task("Tell the team.", steps=1, step_ms=20, end="authorization", authorization=asked)
    try:
        await start_asking_again(client, helper_request(owner, "notify", task))
        await eventually(lambda: _unreported(client, owner, "notify"), timeout=30)
        grant = answer_request(
            owner, "notify", "authorization", option_id="grant", text="send_mail to carol@example.com"
        )
        assert (await client.answer(grant)).granted == "send_mail to carol@example.com"
        await eventually(lambda: _session_of(client, owner, "notify.answer"), timeout=30, interval=0.02)
        processes.kill("worker")
        await asyncio.sleep(2)
        await processes.respawn("worker")
        done = await eventually(lambda: _finished(client, owner, "notify.answer"), timeout=120, interval=0.2)
    finally:
        await client.aclose()
    assert [(action.tool, action.whom) for action in done.actions] == [("send_mail", "carol@example.com")]
    with sqlite3.connect(processes.data / "core.sqlite3") as core_db:
        sessions = core_db.execute("SELECT session_id FROM sessions WHERE helper_id = 'notify.answer'").fetchall()
        used = core_db.execute("SELECT session_id FROM used_grants").fetchall()
    assert len(sessions) == 1 and used == sessions


async def _session_of(client: HelperClient, owner: str, helper_id: str) -> bool:
    views = [view for view in await client.list_helpers(owner) if view.helper_id == helper_id]
    return (
        bool(views) and views[0].started_at is not None and (await client.show(owner, helper_id)).session_id is not None
    )


async def _finished(client: HelperClient, owner: str, helper_id: str):
    view = await client.show(owner, helper_id)
    return view if view.outcome_kind is not None else None
