"""A stop is logged and reported as confirmed only when the core said it stopped (R7, R21, R37, R38).

The cancel and the recovery of a lost session, against the fake core over HTTP and a real store: a core that
answers "no such session" (404) to a cancel, or keeps a turn running, has not confirmed a stop, and a closed
helper keeps its slot until the turn's end (or the hard ceiling) says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.session import SessionActivities
from clients.core_client import CoreClient
from contracts.core_api import SessionStatus
from domain.limits import Limits
from domain.messages.activities import RecoverSession, RowKey, SessionRef
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from domain.run.cleanup import FOUND_BY_KEY
from store.helper_store import HelperStore
from tests.fakes.fake_core import FakeCore
from tests.helpers import eventually, eventually_skipping, helper_request, parked_of
from tests.integration.stack import KEY, core_and_row, create_session, time_stack


@dataclass
class Rig:
    core: FakeCore
    activities: SessionActivities
    store: HelperStore
    client: CoreClient


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    core = FakeCore()
    async with core_and_row(tmp_path, core) as (client, store):
        yield Rig(core, SessionActivities(store, client), store, client)


async def _session(rig: Rig) -> str:
    return await create_session(rig.client)


def _ref(session_id: str) -> SessionRef:
    return SessionRef(owner="anna", helper_id="h1", session_id=session_id, check_ms=2_000)


def _last_attempt() -> ActivityEnvironment:
    """The recovery's attempt on which a failed reset parks the session (the park rule's budget)."""
    assert FOUND_BY_KEY.attempts is not None
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=FOUND_BY_KEY.attempts)
    return env


async def test_a_cancel_the_core_answers_with_no_such_session_is_not_a_confirmed_stop(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """R7, R21: a 404 to a cancel is not the core saying the turn stopped (a core without the endpoint answers
    the same): not stopped, logged as not confirmed."""
    session_id = await _session(rig)
    rig.core.misbehave, rig.core.misbehave_on = "lost", {"cancel"}
    with caplog.at_level(logging.INFO):
        answer = await ActivityEnvironment().run(rig.activities.cancel_session, _ref(session_id))
    assert not answer.stopped and "not confirmed" in answer.detail
    assert rig.core.sessions[session_id].status is SessionStatus.RUNNING
    assert any("stop not confirmed" in record.getMessage() for record in caplog.records)


async def test_a_cancel_the_core_fails_is_left_to_the_activitys_retry_policy(rig: Rig) -> None:
    """R7, R21: a cancel the core fails (503) is not answered "not stopped" by the activity: it fails retryably, so
    its policy tries again (`workflows.options.cancel`), and the workflow takes the last failure as not confirmed."""
    session_id = await _session(rig)
    rig.core.misbehave, rig.core.misbehave_on = "503", {"cancel"}
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(rig.activities.cancel_session, _ref(session_id))
    assert not failed.value.non_retryable
    assert rig.core.sessions[session_id].status is SessionStatus.RUNNING


async def test_a_cancel_answered_stopped_of_a_running_turn_is_not_believed(rig: Rig) -> None:
    """R7, R37: "stopped" beside a running status is not a stop; a stopped turn is."""
    session_id = await _session(rig)
    rig.core.on_cancel = "later"
    answer = await ActivityEnvironment().run(rig.activities.cancel_session, _ref(session_id))
    assert not answer.stopped and answer.detail == "running"
    rig.core.on_cancel = "stop"
    answer = await ActivityEnvironment().run(rig.activities.cancel_session, _ref(session_id))
    assert answer.stopped and answer.detail == "cancelled"


async def test_a_lost_session_the_core_never_confirms_stopped_is_reported_and_logged_as_not_stopped(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """R38, R20: the session found by its key: the cancel answers "not yet" and every reset fails; on the last
    attempt the recovery parks the session and reports it not stopped, and the log says the stop is not
    confirmed (a recovery that reported it stopped would let the slot pass on as if it were)."""
    session_id = await _session(rig)
    rig.core.on_cancel, rig.core.reset_fails = "later", True
    recover = RecoverSession(
        row=RowKey(owner="anna", helper_id="h1", seq=1, generation=3), idempotency_key=KEY, limits=Limits()
    )
    with caplog.at_level(logging.INFO):
        found = await _last_attempt().run(rig.activities.recover_session, recover)
    assert found.session_id == session_id and not found.stopped
    assert [p.session_id for p in await parked_of(rig.store, "anna")] == [session_id]
    assert any("stop not confirmed" in record.getMessage() for record in caplog.records)


async def test_a_lost_session_the_core_answers_404_about_is_not_confirmed_stopped(rig: Rig) -> None:
    """R38: the core names the session for the key, then answers 404 to its cancel and its reset: no answer
    said it stopped, so it is not reported stopped."""
    session_id = await _session(rig)
    rig.core.misbehave, rig.core.misbehave_on = "lost", {"cancel", "reset"}
    recover = RecoverSession(
        row=RowKey(owner="anna", helper_id="h1", seq=1, generation=3), idempotency_key=KEY, limits=Limits()
    )
    found = await ActivityEnvironment().run(rig.activities.recover_session, recover)
    assert found.session_id == session_id and not found.stopped


async def test_a_lost_session_the_core_resets_is_confirmed_stopped(rig: Rig) -> None:
    """R38: a reset the core answers `reset: true` ends the session: confirmed."""
    session_id = await _session(rig)
    rig.core.on_cancel = "later"
    recover = RecoverSession(
        row=RowKey(owner="anna", helper_id="h1", seq=1, generation=3), idempotency_key=KEY, limits=Limits()
    )
    found = await ActivityEnvironment().run(rig.activities.recover_session, recover)
    assert found.session_id == session_id and found.stopped and session_id not in rig.core.sessions


async def test_a_closed_helper_whose_cancel_is_answered_404_keeps_its_slot_until_the_turn_ends(
    time_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """R7, R21: closed while running, and the core answers the cancel with 404 while the turn runs on: the row is
    closed at once, but the slot stays held (the next helper waits) until the follow sees the turn end."""
    core = FakeCore(misbehave="lost", misbehave_on={"cancel"})
    async with time_stack(time_env, tmp_path, core, max_running=1, max_open=2) as stack:
        await stack.client.start(helper_request("cy", "long"))
        session = await eventually(lambda: core.session_of("long"))
        await stack.client.start(helper_request("cy", "next"))
        await stack.client.close("cy", "long")
        await eventually(lambda: core.cancel_calls >= 1)
        closed = await stack.store.get("cy", "long")
        await asyncio.sleep(2.0)  # a slot passed on at the 404 would have reached "next" within a second
        assert core.session_of("next") is None, "the slot passed on without a confirmed stop"
        session.end(SessionStatus.CANCELLED)
        # The follow sees the end at its next attempt, after its retry interval of server time.
        final = await eventually_skipping(time_env, lambda: _final(stack.store, "cy", "long"))
        await eventually_skipping(time_env, lambda: core.session_of("next") is not None)
    assert closed is not None and closed.state is RowState.CLOSED
    assert final is not None and final.outcome_kind is OutcomeKind.CLOSED


async def _final(store: HelperStore, owner: str, helper_id: str) -> HelperRow | None:
    found = await store.get(owner, helper_id)
    return found if found is not None and found.outcome_kind is not None else None
