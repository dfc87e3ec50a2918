"""Where the store's transactions run: a SQLite file's on the store's own thread, one hop from the event loop;
PostgreSQL's and an in-memory SQLite's on the async engine. Whichever way, a transaction commits whole or not
at all, and what it wrote is what the other reads see (R27)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from store.database import create_engine
from store.transactions import Transactions
from tests.conftest import POSTGRES_URL
from tests.helpers import fresh_postgres_database


def _thread_name(connection: Connection) -> str:
    return threading.current_thread().name


async def test_a_sqlite_files_transactions_run_on_the_stores_own_thread(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.sqlite3'}")
    transactions = Transactions(engine)
    try:
        assert (await transactions.write(_thread_name)).startswith("store")
        assert (await transactions.read(_thread_name)).startswith("store")
        await transactions.write(lambda connection: connection.execute(text("CREATE TABLE t (n INTEGER)")))
        await transactions.write(lambda connection: connection.execute(text("INSERT INTO t VALUES (1)")))
        # Committed: the async engine, another connection, sees it.
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1
    finally:
        await transactions.close()
        await engine.dispose()


def _insert_then_fail(connection: Connection) -> None:
    connection.execute(text("INSERT INTO t VALUES (2)"))
    raise RuntimeError("the work failed after its first statement")


async def _a_raising_transaction_writes_nothing(transactions: Transactions) -> None:
    await transactions.write(lambda connection: connection.execute(text("CREATE TABLE t (n INTEGER)")))
    with pytest.raises(RuntimeError, match="after its first statement"):
        await transactions.write(_insert_then_fail)
    count = await transactions.read(lambda connection: connection.execute(text("SELECT count(*) FROM t")))
    assert count.scalar_one() == 0


@pytest.mark.parametrize("where", ["file", "memory"])
async def test_a_transaction_that_raises_writes_nothing(tmp_path: Path, where: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'store.sqlite3'}" if where == "file" else "sqlite+aiosqlite://"
    engine = create_engine(url)
    transactions = Transactions(engine)
    try:
        await _a_raising_transaction_writes_nothing(transactions)
    finally:
        await transactions.close()
        await engine.dispose()


async def test_an_in_memory_sqlite_stays_on_the_async_engine() -> None:
    """An in-memory database is private to its connection: a second engine would see another, empty one."""
    engine = create_engine("sqlite+aiosqlite://")
    transactions = Transactions(engine)
    try:
        assert await transactions.write(_thread_name) == threading.current_thread().name
    finally:
        await transactions.close()
        await engine.dispose()


async def test_postgresql_transactions_run_on_the_async_engine() -> None:
    async with fresh_postgres_database(POSTGRES_URL) as url:
        engine = create_engine(url)
        transactions = Transactions(engine)
        try:
            assert await transactions.write(_thread_name) == threading.current_thread().name
            await _a_raising_transaction_writes_nothing(transactions)
        finally:
            await transactions.close()
            await engine.dispose()


async def test_a_write_cancelled_on_the_stores_thread_still_ends_and_frees_its_connection(tmp_path: Path) -> None:
    """A caller that stops waiting (an activity cancelled, a bound passed) does not stop the transaction: it
    commits on the store's thread, and the next write gets a connection (every write is guarded, so a retry of
    one that did commit changes nothing)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.sqlite3'}")
    transactions = Transactions(engine)

    def slow_insert(connection: Connection) -> None:
        connection.execute(text("INSERT INTO t VALUES (1)"))
        time.sleep(0.3)

    try:
        await transactions.write(lambda connection: connection.execute(text("CREATE TABLE t (n INTEGER)")))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(transactions.write(slow_insert), timeout=0.05)
        await transactions.write(lambda connection: connection.execute(text("INSERT INTO t VALUES (2)")))
        count = await transactions.read(lambda connection: connection.execute(text("SELECT count(*) FROM t")))
        assert count.scalar_one() == 2
    finally:
        await transactions.close()
        await engine.dispose()
