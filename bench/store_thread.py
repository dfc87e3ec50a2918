"""CPU per store write on SQLite: the store's own thread against the same statement through aiosqlite.

    .venv/bin/python -m bench.store_thread [--writes 2000] [--postgres URL]

One migrated store in a temporary folder; each way writes one helper row's progress `--writes` times (the two
ways taking turns, a hundred writes at a time), and the process's CPU (all threads) is read around each turn.
Prints:

    store write (progress, SQLite): project … ms CPU, … ms wall | baseline (aiosqlite) … | ratio ×…

The project's way is `HelperStore.write_progress` (store/transactions.py: the whole transaction on the store's
thread); the baseline sends the same statement through the async engine (aiosqlite: a hop to the driver's
thread and back for every DB-API call). With `--postgres`, the same two ways on PostgreSQL (asyncpg), where the
store runs the transaction with `run_sync` on the async engine, for information.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from domain.work import Usage
from store.helper_store import HelperStore
from store.statements import progress_update
from tests.store.test_helper_store import running

Write = Callable[[int], Awaitable[object]]


async def _timed(writes: int, ways: tuple[Write, Write]) -> list[tuple[float, float]]:
    """CPU and wall per write of each way, in ms; the ways take turns in chunks, so that a table that grows
    slower with each update (PostgreSQL's dead row versions) weighs on both alike."""
    for write in ways:
        for number in range(50):  # warm: connections, statement caches
            await write(number)
    spent = [[0.0, 0.0] for _ in ways]
    chunk = 100
    for start in range(0, writes, chunk):
        for index, write in enumerate(ways):
            cpu, wall = time.process_time(), time.perf_counter()
            for number in range(start, min(start + chunk, writes)):
                await write(number)
            spent[index][0] += time.process_time() - cpu
            spent[index][1] += time.perf_counter() - wall
    return [(1000 * cpu / writes, 1000 * wall / writes) for cpu, wall in spent]


async def _both_ways(url: str, writes: int) -> list[tuple[float, float]]:
    """A migrated store at `url`: per write, the store's way, then the same statement awaited on the async engine."""
    store = await HelperStore.connect(url, run_migrations=True)
    try:
        await running(store)  # admitted, then started at generation 2: each write below applies

        async def through_the_store(number: int) -> object:
            return await store.write_progress("anna", "h1", 1, 2, Usage(steps=number), "working")

        async def awaited_statement(number: int) -> object:
            statement = progress_update("anna", "h1", 1, 2, {"steps": number, "last_message": "working"})
            async with store.engine.begin() as connection:
                return (await connection.execute(*statement)).rowcount

        return await _timed(writes, (through_the_store, awaited_statement))
    finally:
        await store.close()


async def measure(writes: int, postgres: str | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        [(cpu, wall), (base_cpu, base_wall)] = await _both_ways(
            f"sqlite+aiosqlite:///{Path(scratch) / 's.sqlite3'}", writes
        )
    print(
        f"store write (progress, SQLite, {writes} writes): project {cpu:.3f} ms CPU, {wall:.3f} ms wall | "
        f"baseline (aiosqlite) {base_cpu:.3f} ms CPU, {base_wall:.3f} ms wall | ratio ×{cpu / base_cpu:.2f}",
        flush=True,
    )
    if postgres:
        from tests.helpers import fresh_postgres_database

        async with fresh_postgres_database(postgres) as url:
            [(cpu, wall), (base_cpu, base_wall)] = await _both_ways(url, writes)
        print(
            f"store write (progress, PostgreSQL, asyncpg): run_sync {cpu:.3f} ms CPU, {wall:.3f} ms wall | "
            f"awaited statements {base_cpu:.3f} ms CPU, {base_wall:.3f} ms wall  (for information)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_thread")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--postgres", metavar="URL", help="also time the write on this PostgreSQL server")
    arguments = parser.parse_args()
    asyncio.run(measure(arguments.writes, arguments.postgres))


if __name__ == "__main__":
    main()
