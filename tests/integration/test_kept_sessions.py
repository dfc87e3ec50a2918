"""Sessions kept for a follow-up (R20), against the reference core over HTTP and a real store: kept
instead of reset only when a follow-up may continue them, and reset by the sweep once nothing can."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.follow_ups import FollowUps
from clients.core_client import CoreClient, SessionNotFound
from contracts.core_api import CreateSession, SessionLimits
from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.run.kept_sessions import KEPT_AT_MOST, reset_reason
from reference.core.script import scripted_task
from reference.core.server import running_core
from store.helper_store import HelperStore
from tests.helpers import eventually
from tests.store.test_helper_store import row

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def _create(core: CoreClient, helper_id: str, task: str) -> str:
    created = await core.create(
        CreateSession(
            idempotency_key=f"key-{helper_id}",
            owner="anna",
            helper_id=helper_id,
            task=task,
            language="en",
            model="scripted",
            limits=SessionLimits(max_steps=80, max_input_tokens=4_000_000),
        )
    )
    return created.session_id


async def _question_session(core: CoreClient, helper_id: str) -> str:
    task = scripted_task("Pick a venue.", steps=1, step_ms=10, end="question", question="Which one?")
    session_id = await _create(core, helper_id, task)

    async def paused() -> bool:
        return (await core.snapshot(session_id)).status.value == "question"

    await eventually(paused, timeout=10)
    return session_id


@pytest.mark.parametrize("offers", [True, False])
async def test_a_question_session_is_kept_only_on_a_core_that_can_continue_it(tmp_path: Path, offers: bool) -> None:
    async with running_core(tmp_path / "core.sqlite3", offers_follow_ups=offers) as url:
        core = CoreClient(url, 5_000)
        store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
        try:
            session_id = await _question_session(core, "venue")
            await store.insert_admitted(
                row("venue", state=RowState.UNREPORTED, outcome_kind=OutcomeKind.QUESTION, session_id=session_id)
            )
            follow_ups = FollowUps(store, core, None)
            assert await follow_ups.keep_instead_of_reset("anna", "venue", session_id) is offers
            assert [k.session_id for k in await store.kept_sessions()] == ([session_id] if offers else [])
        finally:
            await core.aclose()
            await store.close()


async def test_a_partial_outcome_whose_turn_still_runs_is_not_kept(tmp_path: Path) -> None:
    """At the hard ceiling a helper finalizes partial whatever the core does: the turn may still run, and a
    running session is reset (stopped) as before, never kept (R15, R38)."""
    async with running_core(tmp_path / "core.sqlite3") as url:
        core = CoreClient(url, 5_000)
        store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
        try:
            session_id = await _create(core, "scan", scripted_task("Scan all.", end="run", steps=80, step_ms=1_000))
            assert (await core.snapshot(session_id)).status.value == "running"
            await store.insert_admitted(
                row("scan", state=RowState.UNREPORTED, outcome_kind=OutcomeKind.PARTIAL, session_id=session_id)
            )
            assert not await FollowUps(store, core, None).keep_instead_of_reset("anna", "scan", session_id)
            assert await store.kept_sessions() == []
        finally:
            await core.aclose()
            await store.close()


async def test_the_sweep_resets_a_kept_session_once_its_row_is_closed_or_it_is_too_old(tmp_path: Path) -> None:
    async with running_core(tmp_path / "core.sqlite3") as url:
        core = CoreClient(url, 5_000)
        store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
        try:
            follow_ups = FollowUps(store, core, None)
            sessions = {}
            for seq, helper_id in enumerate(("closed", "waiting", "old"), start=1):
                sessions[helper_id] = await _question_session(core, helper_id)
                await store.insert_admitted(
                    row(
                        helper_id,
                        seq=seq,
                        state=RowState.UNREPORTED,
                        outcome_kind=OutcomeKind.QUESTION,
                        session_id=sessions[helper_id],
                    )
                )
                assert await follow_ups.keep_instead_of_reset("anna", helper_id, sessions[helper_id])
            assert await store.write_state("anna", "closed", 1, 5, state=RowState.CLOSED)

            assert await follow_ups.reset_kept_sessions() == 1  # only the closed row's session
            with pytest.raises(SessionNotFound):
                await core.snapshot(sessions["closed"])
            assert (await core.snapshot(sessions["waiting"])).status.value == "question"

            later = datetime.now(UTC) + KEPT_AT_MOST + timedelta(minutes=1)
            assert await follow_ups.reset_kept_sessions(later) == 2  # kept for the longest a follow-up may wait
            assert await store.kept_sessions() == []
        finally:
            await core.aclose()
            await store.close()


def test_reset_reasons() -> None:
    earlier = row("h1", state=RowState.DELIVERED, outcome_kind=OutcomeKind.QUESTION, followed_up_by="h2")
    waiting = row("h2", seq=2, state=RowState.WAITING, follow_up_of="h1")
    running = row("h2", seq=2, state=RowState.RUNNING, session_id="s2", follow_up_of="h1")
    assert reset_reason(NOW, 1, None, None, NOW) == "its row is gone"
    assert reset_reason(NOW, 7, earlier, waiting, NOW) == "its row is gone"  # a later helper reused the id
    assert reset_reason(NOW, 1, earlier, waiting, NOW) is None  # the follow-up has yet to continue it
    assert reset_reason(NOW, 1, earlier, running, NOW) == "its follow-up has its own session"
    assert reset_reason(NOW, 1, earlier, None, NOW) == "its follow-up is gone"
    lone = earlier.model_copy(update={"followed_up_by": None, "state": RowState.UNREPORTED})
    assert reset_reason(NOW, 1, lone, None, NOW + KEPT_AT_MOST - timedelta(seconds=1)) is None
    assert reset_reason(NOW, 1, lone, None, NOW + KEPT_AT_MOST) is not None
    closed = lone.model_copy(update={"state": RowState.CLOSED})
    assert reset_reason(NOW, 1, closed, None, NOW) == "its row was closed"
