"""A store write is one transaction on the async engine: it commits whole or not at all, also when it fails or is
cancelled halfway (a helper's store write races its hard ceiling, R35), and it never keeps its connection: the
next write applies (R19, R25)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from sqlalchemy import insert, text
from sqlalchemy.pool import QueuePool

from domain.outcome import OutcomeKind
from domain.rows import RowState
from domain.work import Usage
from store.helper_store import HelperStore, RowChanges, row_table
from store.statements import to_columns, usage_table
from tests.store.test_helper_store import T0, backend, row, running, store  # noqa: F401  (the fixture)

BOUND_S = 10  # every wait in these tests; a write that still hangs then has leaked


def _usage_columns(owner: str, helper_id: str, seq: int) -> dict[str, object]:
    return {
        "owner": owner,
        "helper_id": helper_id,
        "seq": seq,
        "goal_id": None,
        "model": "gpt-large",
        "outcome_kind": "completed",
        "steps": 0,
        "work_tokens": 0,
        "input_tokens": 0,
        "started_at": None,
        "finished_at": T0,
    }


async def _rows_and_usage(store: HelperStore) -> tuple[int, int]:  # noqa: F811
    async with store.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT count(*) FROM helper_rows"))).scalar_one()
        lines = (await connection.execute(text("SELECT count(*) FROM helper_usage"))).scalar_one()
    return int(rows), int(lines)


def _checked_out(store: HelperStore) -> int:  # noqa: F811
    pool = store.engine.pool
    assert isinstance(pool, QueuePool), pool  # a file's or a server's engine pools its connections
    return pool.checkedout()


async def test_a_transaction_that_fails_halfway_writes_nothing(store: HelperStore) -> None:  # noqa: F811
    """The first statement applied, the second failed: the first is undone too."""
    with pytest.raises(RuntimeError, match="after its first statement"):
        async with store.engine.begin() as connection:
            await connection.execute(insert(row_table).values(to_columns(row("h1"))))
            raise RuntimeError("the write failed after its first statement")
    assert await _rows_and_usage(store) == (0, 0)
    assert _checked_out(store) == 0


async def test_a_transaction_cancelled_halfway_writes_nothing_and_frees_its_connection(
    store: HelperStore,  # noqa: F811
) -> None:
    """A caller that stops waiting between two statements (its activity cancelled) leaves no half transaction
    and no connection checked out."""
    first_done = asyncio.Event()

    async def two_statements() -> None:
        async with store.engine.begin() as connection:
            await connection.execute(insert(row_table).values(to_columns(row("h1"))))
            first_done.set()
            await asyncio.sleep(BOUND_S)
            await connection.execute(insert(usage_table).values(_usage_columns("anna", "h1", 1)))

    task = asyncio.create_task(two_statements())
    async with asyncio.timeout(BOUND_S):
        await first_done.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await _rows_and_usage(store) == (0, 0)
    assert _checked_out(store) == 0
    assert await store.insert_admitted(row("h1"))


@asynccontextmanager
async def _blocking_the_outcome(store: HelperStore) -> AsyncIterator[Callable[[], Awaitable[None]]]:  # noqa: F811
    """Another writer holds what the finalizer's write needs, until the yielded `release` is awaited: on SQLite the
    database's write lock (the row's update waits), on PostgreSQL the usage line's key (the row's update applies,
    the usage line waits: the write is cancelled halfway)."""
    if backend(store) == "sqlite":
        path = store.engine.url.database
        assert path is not None
        lock_holder = sqlite3.connect(path, isolation_level=None)
        lock_holder.execute("BEGIN IMMEDIATE")

        async def release_sqlite() -> None:
            lock_holder.execute("ROLLBACK")

        try:
            yield release_sqlite
        finally:
            lock_holder.close()
        return
    async with store.engine.connect() as holder:
        await holder.execute(insert(usage_table).values(_usage_columns("anna", "h1", 1)))  # uncommitted

        async def release_postgres() -> None:
            await holder.rollback()

        yield release_postgres


async def test_a_finalizer_cancelled_while_it_waits_for_another_writer_leaves_the_row_as_it_was(
    store: HelperStore,  # noqa: F811
) -> None:
    """R19, R35: the outcome and its usage line are written together or not at all. Cancelled while another
    writer holds what it needs, the write changes nothing, keeps no connection, and a retry applies once."""
    before = await running(store)
    outcome: RowChanges = {
        "state": RowState.UNREPORTED,
        "outcome_kind": OutcomeKind.COMPLETED,
        "summary": "done",
        "finished_at": T0 + timedelta(minutes=5),
    }
    usage = Usage(steps=2, work_tokens=20, input_tokens=3)

    def finalize() -> Coroutine[None, None, bool]:
        return store.write_outcome(before, 3, usage, **outcome)

    async with asyncio.timeout(BOUND_S):
        async with _blocking_the_outcome(store) as release:
            task = asyncio.create_task(finalize())
            await asyncio.sleep(0.3)  # the write now waits for the other writer
            assert not task.done()
            task.cancel()
            await release()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await store.get("anna", "h1") == before
        assert await store.reads.usage("anna") == []
        assert _checked_out(store) == 0
        assert await finalize()
    after = await store.get("anna", "h1")
    assert after is not None and after.state is RowState.UNREPORTED and after.generation == 3
    assert len(await store.reads.usage("anna")) == 1
