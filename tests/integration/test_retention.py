"""Retention on the time-skipping server (R29): delivered rows are kept a day from delivery, closed rows a
day from their finish, then removed with their result directories; a directory that resists removal is
logged, the row still goes, and the orphan sweep removes the directory later."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.rows import RowActivities
from contracts.core_api import SessionStatus
from domain.messages.activities import RemoveRows, RowToRemove
from domain.rows import RowState
from starter.inputs import delivered_request, read_request
from store.helper_store import HelperStore
from store.results import ResultDirectories
from tests.fakes.fake_core import FakeCore
from tests.helpers import admitted_row, eventually, eventually_skipping, helper_request, skip_time
from tests.integration.stack import time_stack


async def _finished(store: HelperStore, owner: str, helper_id: str) -> bool:
    row = await store.get(owner, helper_id)
    return row is not None and row.outcome_kind is not None


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def test_delivered_and_closed_rows_expire_with_their_directories(time_env: WorkflowEnvironment, tmp_path: Path):
    """R29, R28: a delivered row lives HELPER_KEEP_MS from delivery, a closed one from its finish; then row
    and result directory are gone, on one timer, without anyone asking."""
    core = FakeCore()
    async with time_stack(time_env, tmp_path, core) as stack:
        client, store = stack.client, stack.store
        for helper_id in ("told", "dropped"):
            await client.start(helper_request("una", helper_id))
            session = await eventually(functools.partial(core.session_of, helper_id))
            session.add_step(100, 10, f"{helper_id} done")
            session.end(SessionStatus.COMPLETED)
            await eventually_skipping(time_env, functools.partial(_finished, store, "una", helper_id))
        await client.close("una", "dropped")  # unreported -> closed: kept a day from its finish
        await skip_time(time_env, timedelta(hours=12), chunk=timedelta(hours=1))
        await client.read(read_request("una", "t1", ["told"]))
        await client.delivered(delivered_request("una", "t1", answer_chars=5))  # kept a day from now
        directories = {v.helper_id: Path(v.result_dir) for v in await client.list_helpers("una")}
        assert all([await _exists(d) for d in directories.values()])

        # The closed row is now a day old; the delivered one only half a day.
        await skip_time(time_env, timedelta(hours=12, minutes=5), chunk=timedelta(hours=1))
        await eventually(lambda: _gone(store, "una", "dropped"))
        assert not await _exists(directories["dropped"])
        assert await store.get("una", "told") is not None  # delivered only 12 hours ago

        await skip_time(time_env, timedelta(hours=12), chunk=timedelta(hours=1))
        await eventually(lambda: _gone(store, "una", "told"))
        assert not await _exists(directories["told"])


async def _gone(store: HelperStore, owner: str, helper_id: str) -> bool:
    return await store.get(owner, helper_id) is None


async def test_a_directory_that_resists_is_logged_the_row_goes_and_the_sweep_removes_it_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """R29: removal of a result directory fails: the row removal still succeeds, the failure is logged,
    and the orphan sweep removes the directory once it can."""
    store = await HelperStore.connect(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite3'}", run_migrations=True)
    results = ResultDirectories(tmp_path / "results")
    rows = RowActivities(store, results)
    env = ActivityEnvironment()
    directory = results.path_for("vic", "h1", 1)
    now = datetime.now(UTC)
    await store.insert_admitted(
        admitted_row("vic", "h1", at=now, result_dir=directory, state=RowState.CLOSED, task="t", model="m")
    )
    results.write_outcome(directory, "the outcome", {"kind": "completed"})

    real_rmtree = shutil.rmtree

    def stubborn(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", stubborn)
    with caplog.at_level(logging.WARNING):
        removed = await env.run(rows.remove_rows, RemoveRows(owner="vic", rows=[RowToRemove(helper_id="h1", seq=1)]))
    assert removed.removed == ["h1"] and removed.directories_left == [str(directory)]
    assert await store.get("vic", "h1") is None  # the row operation succeeded
    assert "could not remove result directory" in caplog.text
    assert await _exists(directory)

    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert await env.run(rows.sweep_orphan_directories, 0) == 1
    assert not await _exists(directory)
    await store.close()
