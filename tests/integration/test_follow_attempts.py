"""A follow attempt costs no heartbeat while the core answers, goes on from the row, and outlives a store outage (R57).

The follow activity against the fake core over HTTP and a real SQLite store, one attempt at a time as Temporal runs
them (`ActivityEnvironment`, its heartbeats recorded): what the next attempt finds is only the row and the heartbeat
details the last one left.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.session as session_module
from activities.session import SessionActivities
from clients.core_client import CoreClient
from domain.limits import FollowTuning
from domain.messages.activities import CoreFaults, FollowRequest, Verdict
from protocol.errors import ErrorType
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore
from tests.integration.stack import core_and_row, create_session

# Windows of a second: each attempt ends by itself, as a 25-minute one does.
TUNING = FollowTuning(poll_ms=50, window_ms=1_000, wait_ms=200, silence_ms=60_000, bad_answers=5)


@dataclass
class Rig:
    core: FakeCore
    activities: SessionActivities
    store: HelperStore
    client: CoreClient
    progress_writes: list[int]  # the steps of every progress write the store was asked for


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    core = FakeCore(long_poll="honest")
    async with core_and_row(tmp_path, core) as (client, store):
        writes: list[int] = []
        write_progress = store.write_progress

        async def counted(*args: Any) -> bool:
            writes.append(args[4].steps)
            return await write_progress(*args)

        store.write_progress = counted  # type: ignore[method-assign,assignment]
        yield Rig(core, SessionActivities(store, client), store, client, writes)


async def _follow_request(rig: Rig) -> FollowRequest:
    return FollowRequest(
        owner="anna",
        helper_id="h1",
        seq=1,
        session_id=await create_session(rig.client),
        generation=2,
        ceiling_tokens=1_000_000,
        tuning=TUNING,
        check_ms=2_000,
    )


class StoreOutage:
    """A store write that fails as an unreachable server's does while `down`, and is made once it is back."""

    def __init__(self) -> None:
        self.down = True

    def around(self, write: Callable[..., Awaitable[bool]]) -> Callable[..., Awaitable[bool]]:
        async def failing(*args: Any, **kwargs: Any) -> bool:
            if self.down:
                raise OperationalError("UPDATE helper_rows", {}, ConnectionRefusedError("the store is down"))
            return await write(*args, **kwargs)

        return failing


def _attempt(number: int, details: list[Any] | None = None) -> tuple[ActivityEnvironment, list[Any]]:
    """An environment for attempt `number`, with the heartbeat details the last attempt left; and the heartbeats
    this one sends."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=number, heartbeat_details=details or [])
    sent: list[Any] = []
    env.on_heartbeat = lambda *args: sent.append(args[0])
    return env, sent


async def _window_ends(env: ActivityEnvironment, rig: Rig, request: FollowRequest) -> None:
    with pytest.raises(ApplicationError) as ended:
        await env.run(rig.activities.follow_session, request)
    assert ended.value.type == ErrorType.FOLLOW_WINDOW_ELAPSED, ended.value


async def test_an_answering_core_costs_no_heartbeat_and_the_next_attempt_writes_only_what_changed(rig: Rig) -> None:
    request = await _follow_request(rig)
    session = rig.core.only_session()
    session.add_step(1_000, 100, "Read the first page.")
    first, first_beats = _attempt(1)
    await _window_ends(first, rig, request)
    assert rig.progress_writes == [1]

    second, second_beats = _attempt(2)
    await _window_ends(second, rig, request)
    assert rig.progress_writes == [1], "the row held the step: the next attempt wrote nothing again"

    session.add_step(1_000, 100, "Read the second page.")
    third, third_beats = _attempt(3)
    await _window_ends(third, rig, request)
    assert rig.progress_writes == [1, 2]
    assert first_beats == second_beats == third_beats == [], "no heartbeat while the core answers"
    stored = await rig.store.get("anna", "h1")
    assert stored is not None
    assert (stored.steps, stored.last_message) == (2, "Read the second page.")


async def test_a_store_outage_ends_no_attempt_and_the_row_catches_up_after_it(rig: Rig) -> None:
    request = await _follow_request(rig)
    session = rig.core.only_session()
    outage = StoreOutage()
    rig.store.write_progress = outage.around(rig.store.write_progress)  # type: ignore[method-assign,assignment]
    session.add_step(1_000, 100, "Read the first page.")
    env, beats = _attempt(1)
    await _window_ends(env, rig, request)  # the window's own end, not a store error
    stored = await rig.store.get("anna", "h1")
    assert stored is not None and stored.steps == 0, "nothing written while the store was down"

    outage.down = False
    env, beats = _attempt(2)
    await _window_ends(env, rig, request)
    stored = await rig.store.get("anna", "h1")
    assert stored is not None and stored.steps == 1, "written after the next read once the store answered"
    assert beats == []


async def test_the_cores_silence_keeps_its_budget_across_attempts(rig: Rig) -> None:
    request = await _follow_request(rig)
    rig.core.misbehave, rig.core.misbehave_on = "503", {"snapshot"}
    env, beats = _attempt(1)
    await _window_ends(env, rig, request)
    assert beats, "the silence went into the heartbeat"
    faults = CoreFaults.model_validate(beats[-1])
    assert faults.silent_since is not None

    # The next attempt, later, counts the silence from when it began: a budget already spent ends it at once.
    spent = faults.model_copy(update={"silent_since": faults.silent_since - timedelta(seconds=61)})
    env, _ = _attempt(2, [spent.model_dump(mode="json")])
    result = await env.run(rig.activities.follow_session, request)
    assert result.verdict is Verdict.CORE_FAILED and result.silent

    # Once the core answers again, the faults are cleared in the heartbeat too.
    rig.core.misbehave = None
    env, beats = _attempt(3, [faults.model_dump(mode="json")])
    await _window_ends(env, rig, request)
    assert CoreFaults.model_validate(beats[-1]) == CoreFaults()


async def test_an_attempt_names_its_replica_after_a_store_outage_unless_the_replica_was_taken_for_dead(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R46, R57: an attempt whose start could not name its replica in the row (the store away) names it after a
    later read, so that the survivors find it should this replica die. Once this replica was taken for dead, it does
    not: the survivors may run the follow elsewhere by then, and the row must not name a replica that no longer
    runs it (they would then not look for the follow when the replica that does dies)."""
    monkeypatch.setattr(session_module, "_this_replica", lambda: "111@frozen")
    request = await _follow_request(rig)
    outage = StoreOutage()
    rig.store.record_follow_replica = outage.around(rig.store.record_follow_replica)  # type: ignore[method-assign,assignment]

    async def store_back(taken_for_dead: bool) -> None:
        await asyncio.sleep(0.3)
        if taken_for_dead:
            rig.activities.takeover.happened()
        outage.down = False

    back = asyncio.create_task(store_back(taken_for_dead=True))
    await _window_ends(_attempt(1)[0], rig, request)
    await back
    assert await rig.store.follows_without_live_replica() == [("anna", "h1", None)], "not named by a taken replica"

    outage.down = True
    back = asyncio.create_task(store_back(taken_for_dead=False))
    await _window_ends(_attempt(2)[0], rig, request)
    await back
    assert await rig.store.follows_without_live_replica() == [("anna", "h1", "111@frozen")], "named after the outage"
