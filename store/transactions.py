"""Where the store's writes and its one-row read run: one transaction as one plain function of a connection.

PostgreSQL runs it on the async engine (asyncpg, `run_sync`), as every other statement. A SQLite file runs it on a
synchronous engine of its own, on one thread that the store keeps: through aiosqlite each DB-API call is a hop
from the event loop to the driver's thread and back (about ten per transaction, 1.1 ms of CPU per progress write
on the project's machine), on the store's thread the whole transaction is one hop (0.4 ms; `python -m
bench.store_thread`). One thread is enough for SQLite, which takes one writer at a time anyway; WAL lets readers
elsewhere go on meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from store.database import SQLITE_TIMEOUT_S, set_sqlite_pragmas

T = TypeVar("T")
Work = Callable[[Connection], T]


class Transactions:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._sync: Engine | None = None
        self._thread: ThreadPoolExecutor | None = None
        url = engine.url
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            # An in-memory database is private to its connection: it stays on the async engine.
            self._sync = create_engine(url.set(drivername="sqlite"), connect_args={"timeout": SQLITE_TIMEOUT_S})
            set_sqlite_pragmas(self._sync)
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    @property
    def sync_engine(self) -> Engine:
        """The engine the transactions' SQL goes through (for listeners: what the store sends)."""
        return self._sync or self.engine.sync_engine

    async def write(self, work: Work[T]) -> T:
        """`work` in one transaction, committed when it returns, rolled back when it raises."""
        if self._sync is None:
            async with self.engine.begin() as connection:
                return await connection.run_sync(work)
        sync = self._sync
        return await self._on_thread(lambda: _in_transaction(sync, work))

    async def read(self, work: Work[T]) -> T:
        if self._sync is None:
            async with self.engine.connect() as connection:
                return await connection.run_sync(work)
        sync = self._sync
        return await self._on_thread(lambda: _connected(sync, work))

    async def close(self) -> None:
        if self._sync is not None and self._thread is not None:
            await self._on_thread(self._sync.dispose)  # its connections belong to the store's thread
            self._thread.shutdown(wait=True)
            self._sync, self._thread = None, None

    async def _on_thread(self, call: Callable[[], T]) -> T:
        # Cancelled while it runs, the transaction still ends on the thread (committed or rolled back) and its
        # connection goes back to the pool: every write is guarded and idempotent, so a retry is safe.
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)


def _in_transaction(engine: Engine, work: Work[T]) -> T:
    with engine.begin() as connection:
        return work(connection)


def _connected(engine: Engine, work: Work[T]) -> T:
    with engine.connect() as connection:
        return work(connection)
