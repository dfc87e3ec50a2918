"""Iva's per-turn reads against a full store: `unreported` and `list` for one owner among many (R43).

    .venv/bin/python -m tools.bench.reads [--sizes 1000x20,50000x20] [--samples 300] [--postgres URL] [--analyze]

For each size (owners × rows per owner) fills a fresh store (SQLite in a temporary folder, and PostgreSQL when a
server URL is given: a database is created and dropped) with helper rows in every state, in bulk on the bare
driver (executemany on SQLite, COPY on PostgreSQL), then times, in the same run, each read of a random owner and
`SELECT 1` on the same connection as the baseline of a round trip: the same reads (`store/reads.py`) once on the bare
driver (what the starter's read commands use) and once on `HelperStore`'s engine (SQLAlchemy, what the worker
uses). Prints one line per read:

    <engine> <size> <read> (<path>): project p50=… ms p99=… ms | baseline p50=… ms p99=… ms | ratio ×… / ×…

The target (R43: flat as owners grow) is `unreported` p99 ≤ 2× `SELECT 1`'s p99. On the bare SQLite path that
ratio says little: `SELECT 1` is a call into the library in this process (a few microseconds), so the read's own
decoding (rows into views) is all it shows, and the line names no target; on SQLite the target is read through
`HelperStore`, whose `SELECT 1` goes through aiosqlite's thread and back, and flatness shows in the last lines,
which compare each read at the largest size with the smallest. On PostgreSQL the fill ends with `VACUUM (ANALYZE)`,
what autovacuum does in time after a bulk load (left to autovacuum, it runs during the timings); `--analyze`
runs ANALYZE after the SQLite fill too (the runtime never does on SQLite).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from config.store_address import StoreAddress
from domain.limits import Limits
from domain.rows import RowState
from store.database import create_engine, migrate
from store.helper_store import HelperStore
from store.reads import HELPER_ROW_COLUMNS, RowReader, open_bare, open_sqlite

STATES = [RowState.WAITING, RowState.RUNNING, RowState.UNREPORTED, RowState.DELIVERED, RowState.CLOSED]
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TARGET = 2
BATCH = 20_000


def _templates(dialect: str) -> list[dict[str, Any]]:
    """One row's columns per state, as the store writes them on `dialect` (JSON as text; SQLite keeps a moment as
    UTC text); each row of the fill copies one and names its owner, id and seq."""
    moment: Any = T0 if dialect == "postgresql" else T0.strftime("%Y-%m-%d %H:%M:%S.%f")
    limits = json.dumps(Limits().model_dump())
    templates = []
    for state in STATES:
        finished = state in (RowState.UNREPORTED, RowState.DELIVERED, RowState.CLOSED)
        templates.append(
            {
                "goal_id": None,
                "state": state.value,
                "task": "Find the Q3 report and draft a summary",
                "boundary": json.dumps(["send_mail to board@example.com"]),
                "language": "en",
                "model": "scripted",
                "limits": limits,
                "session_id": None,
                "steps": 3,
                "work_tokens": 1200,
                "input_tokens": 40,
                "last_message": "",
                # Unreported questions and delivered authorizations: the owner's inbox of waits (R56) has some.
                "outcome_kind": WAITING_KINDS.get(state, "completed") if finished else None,
                "summary": "Mailed the Q3 report to the board." if finished else None,
                "actions": "[]",
                "admitted_at": moment,
                "started_at": None,
                "follow_started_at": None,
                "deadline_at": None,
                "finished_at": moment if finished else None,
                "delivered_at": None,
                "keep_until": None,
                "generation": 1,
                "updated_at": moment,
                "follow_up_of": None,
                "followed_up_by": None,
                "choices": None,
                "wait_ends_at": None,
                "wait_reminders_ms": None,
                "granted_action": None,
            }
        )
    return templates


WAITING_KINDS = {RowState.UNREPORTED: "question", RowState.DELIVERED: "authorization"}


def _all_rows(owners: int, rows: int, dialect: str) -> Iterator[tuple[Any, ...]]:
    templates = _templates(dialect)
    for owner_number in range(owners):
        owner = f"owner-{owner_number:06d}"
        for number in range(rows):
            helper_id = f"h{number:03d}"
            named = {"owner": owner, "helper_id": helper_id, "seq": number + 1, "result_dir": f"/r/{owner}/{helper_id}"}
            columns = {**templates[number % len(STATES)], **named}
            yield tuple(columns[name] for name in HELPER_ROW_COLUMNS)


def _batches(rows: Iterator[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def fill_rows(url: str, owners: int, rows: int, analyze: bool) -> None:
    """The rows, in bulk on the bare driver: through HelperStore a million rows would take many minutes."""
    address = StoreAddress.parse(url)
    if address.bare == "sqlite":
        connection = sqlite3.connect(address.sqlite_path())
        marks = ", ".join("?" * len(HELPER_ROW_COLUMNS))
        with connection:
            connection.executemany(
                f"INSERT INTO helper_rows ({', '.join(HELPER_ROW_COLUMNS)}) VALUES ({marks})",
                _all_rows(owners, rows, "sqlite"),
            )
        if analyze:
            connection.execute("ANALYZE")
        connection.close()
        return
    import asyncpg  # type: ignore[import-untyped]

    pg = await asyncpg.connect(**address.asyncpg_arguments())
    try:
        for batch in _batches(_all_rows(owners, rows, "postgresql")):
            await pg.copy_records_to_table("helper_rows", records=batch, columns=list(HELPER_ROW_COLUMNS))
        # A million rows just copied in wake autovacuum, which would then vacuum and analyze the table during the
        # timings; a table that Iva reads has long been vacuumed and analyzed. Done here, before the clock starts.
        # (VACUUM alone, without the column statistics, leaves `list` to a bitmap scan, not the owner's index.)
        await pg.execute("VACUUM (ANALYZE) helper_rows")
    finally:
        await pg.close()


Timings = dict[str, tuple[float, float]]  # name: (p50, p99) in ms


async def _time_interleaved(samples: int, calls: dict[str, Callable[[], Awaitable[Any]]]) -> Timings:
    """p50 and p99 of each call, the calls taking turns so that a noisy moment on a shared machine hits all alike."""
    durations: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(samples):
        for name, call in calls.items():
            started = time.perf_counter()
            await call()
            durations[name].append((time.perf_counter() - started) * 1000)
    return {name: _percentiles(values) for name, values in durations.items()}


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[round(0.50 * (len(ordered) - 1))], ordered[round(0.99 * (len(ordered) - 1))]


def _line(name: str, project: tuple[float, float], baseline: tuple[float, float], target: int | None) -> str:
    wanted = f"  (target p99 ≤ ×{target})" if target else ""
    return (
        f"{name}: project p50={project[0]:.2f} ms p99={project[1]:.2f} ms | baseline p50={baseline[0]:.2f} ms "
        f"p99={baseline[1]:.2f} ms | ratio ×{project[0] / baseline[0]:.1f} / ×{project[1] / baseline[1]:.1f}{wanted}"
    )


# (engine, read, path) → (p50, p99) at each size, in the order measured: how a read grows with owners.
Growth = dict[tuple[str, str, str], list[tuple[str, float, float]]]


async def measure(url: str, owners: int, rows: int, samples: int, analyze: bool, growth: Growth) -> list[str]:
    address = StoreAddress.parse(url)
    engine = create_engine(address, creates=True)
    await migrate(engine)
    store = HelperStore(engine)
    kind = engine.dialect.name
    size = f"{owners:,}×{rows}"
    try:
        started = time.perf_counter()
        await fill_rows(url, owners, rows, analyze)
        fill_s = time.perf_counter() - started
        # The console script's reader: on SQLite its queries run in the calling thread (starter.cli.run_command).
        reader: RowReader
        if address.bare == "sqlite":
            reader = open_sqlite(address)
        else:
            reader = await open_bare(address)
        names = [f"owner-{random.randrange(owners):06d}" for _ in range(samples)]
        lines = [f"{kind} {size}: {owners * rows:,} rows filled in {fill_s:.1f} s; {samples} samples per read"]
        try:
            sources: list[tuple[str, Any, Callable[[], Awaitable[Any]]]] = [
                ("bare", reader, reader.ping),  # one `SELECT 1` on the connection the reads use
                ("SQLAlchemy", store.reads, lambda: _engine_select_one(store)),
            ]
            for path, source, select_one in sources:
                picks = iter(names * 2)
                timed = await _time_interleaved(
                    samples,
                    {
                        "SELECT 1": select_one,
                        "unreported": _read(source, picks, [RowState.UNREPORTED]),
                        "list": _read(source, picks, None),
                    },
                )
                baseline = timed["SELECT 1"]
                for read in ("unreported", "list"):
                    growth.setdefault((kind, read, path), []).append((size, *timed[read]))
                # On the bare SQLite path `SELECT 1` is a call into the library (no round trip): no target there.
                target = None if (kind, path) == ("sqlite", "bare") else TARGET
                lines.append(_line(f"{kind} {size} unreported ({path})", timed["unreported"], baseline, target))
                lines.append(_line(f"{kind} {size} list ({path})", timed["list"], baseline, None))
        finally:
            await reader.close()
    finally:
        await engine.dispose()
    return lines


def _read(source: Any, owners: Iterator[str], states: list[RowState] | None) -> Callable[[], Awaitable[Any]]:
    # What `list` and `unreported` read: the views (`store.reads.VIEW_COLUMNS`), not whole rows.
    return lambda: source.views(next(owners), states)


async def _engine_select_one(store: HelperStore) -> None:
    # The way the store's reads reach the database: a connection of its async engine.
    async with store.engine.connect() as connection:
        (await connection.execute(text("SELECT 1"))).scalar()


@contextlib.asynccontextmanager
async def _store_urls(postgres: str | None) -> AsyncIterator[list[str]]:
    with tempfile.TemporaryDirectory() as scratch:
        urls = [f"sqlite+aiosqlite:///{Path(scratch) / 'helpers.sqlite3'}"]
        if not postgres:
            yield urls
            return
        from tests.helpers import fresh_postgres_database

        async with fresh_postgres_database(postgres) as database:
            yield [*urls, database]


async def run(sizes: list[tuple[int, int]], samples: int, postgres: str | None, analyze: bool) -> None:
    growth: Growth = {}
    for owners, rows in sizes:
        async with _store_urls(postgres) as urls:  # a fresh store per size
            for url in urls:
                for line in await measure(url, owners, rows, samples, analyze, growth):
                    print(line, flush=True)
    if len(sizes) > 1:
        # Flat as owners grow (R43): the same read at the largest size against the smallest.
        for (kind, read, path), points in growth.items():
            (small, s50, s99), (large, l50, l99) = points[0], points[-1]
            print(
                f"{kind} {read} ({path}) {large} vs {small}: p50 {l50:.2f} vs {s50:.2f} ms (×{l50 / s50:.1f}), "
                f"p99 {l99:.2f} vs {s99:.2f} ms (×{l99 / s99:.1f})",
                flush=True,
            )


def _size(text: str) -> tuple[int, int]:
    owners, _, rows = text.lower().partition("x")
    return int(owners.replace("_", "")), int(rows or 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", default="1000x20,50000x20", help="owners×rows per owner, comma-separated (default %(default)s)"
    )
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--postgres", help="a PostgreSQL server URL, e.g. postgresql+asyncpg://postgres@127.0.0.1/postgres"
    )
    parser.add_argument("--analyze", action="store_true", help="run ANALYZE after each fill")
    arguments = parser.parse_args()
    sizes = [_size(size) for size in arguments.sizes.split(",") if size.strip()]
    asyncio.run(run(sizes, arguments.samples, arguments.postgres, arguments.analyze))


if __name__ == "__main__":
    main()
