"""Iva's per-turn reads use owner-first indexes on both engines, so they stay flat as owners grow (R43); and the
schema check lets a newer release's expanded schema through while refusing one that is behind."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from config.store_address import StoreAddress
from domain.rows import RowState
from store.database import SchemaNotCurrent, check_schema, create_engine, migrate
from store.helper_store import HelperStore
from store.revisions import REVISIONS
from store.schema import HelperRowRecord
from store.statements import to_columns
from tests.conftest import POSTGRES_URL
from tests.helpers import fresh_postgres_database
from tests.store.test_helper_store import row, store  # noqa: F401  (the SQLite / PostgreSQL fixture)

# The owner-first indexes; the primary key (owner, helper_id) is one too, which SQLite names itself.
OWNER_FIRST = (
    "ix_helper_rows_owner_state_seq",
    "ix_helper_rows_owner_seq",
    "pk_helper_rows",
    "sqlite_autoindex_helper_rows_1",
    "ix_wait_records_owner_ended_at",
)
UNREPORTED = [RowState.UNREPORTED]


async def _statements_of(source: HelperStore, read: Callable[[], Awaitable[Any]]) -> list[tuple[str, Any]]:
    """The SQL a store read sends, with its parameters, as the driver receives them."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        sent.append((statement, parameters))

    event.listen(source.engine.sync_engine, "before_cursor_execute", capture)
    try:
        await read()
    finally:
        event.remove(source.engine.sync_engine, "before_cursor_execute", capture)
    return [(sql, parameters) for sql, parameters in sent if sql.lstrip().upper().startswith("SELECT")]


async def _plan(engine: AsyncEngine, sql: str, parameters: Any) -> str:
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        driver = raw.driver_connection
        if engine.dialect.name == "sqlite":
            cursor = await driver.execute(f"EXPLAIN QUERY PLAN {sql}", parameters)  # type: ignore[union-attr]
            return "\n".join(str(line[-1]) for line in await cursor.fetchall())
        # PostgreSQL: with sequential scans priced out, the plan shows which index the query can use at all
        # (a tiny test table would otherwise always be scanned).
        await driver.execute("SET enable_seqscan = off")  # type: ignore[union-attr]
        lines = await driver.fetch(f"EXPLAIN {sql}", *parameters)  # type: ignore[union-attr]
        await driver.execute("RESET enable_seqscan")  # type: ignore[union-attr]
        return "\n".join(line[0] for line in lines)


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("unreported", lambda s: s.reads.views("anna", UNREPORTED)),
        ("list", lambda s: s.reads.views("anna")),
        ("show", lambda s: s.reads.get("anna", "h3")),
        ("place in the queue", lambda s: s.reads.ahead("anna", 7)),
        ("waits", lambda s: s.reads.waits("anna")),
        ("audit", lambda s: s.reads.wait_records("anna")),
    ],
)
async def test_per_turn_reads_use_an_owner_first_index(
    store: HelperStore,  # noqa: F811
    name: str,
    read: Callable[[HelperStore], Awaitable[Any]],
) -> None:
    """R43, R56: `unreported`, `list`, `show`, the queue position, the inbox of waits and the audit each read one
    owner through an index that starts with the owner; no plan scans the table or every owner's rows in a state (the
    first release's `unreported` searched the state index and sorted all owners' unreported rows)."""
    for owner in ("anna", "boris", "chen"):
        for number in range(1, 9):
            state = [RowState.WAITING, RowState.RUNNING, RowState.UNREPORTED, RowState.DELIVERED][number % 4]
            await store.insert_admitted(row(f"h{number}", seq=number, state=state, owner=owner))
    statements = await _statements_of(store, lambda: read(store))
    assert statements, f"{name} sent no SELECT"
    for sql, parameters in statements:
        plan = await _plan(store.engine, sql, parameters)
        assert any(index in plan for index in OWNER_FIRST), f"{name}: {plan}"
        assert "ix_helper_rows_state " not in plan + " "
        if store.engine.dialect.name == "sqlite":
            assert "SCAN helper_rows" not in plan, f"{name}: {plan}"
            assert "TEMP B-TREE" not in plan, f"{name} sorts instead of reading in index order: {plan}"
        else:
            assert "Seq Scan" not in plan, f"{name}: {plan}"


async def test_the_schema_check_refuses_a_schema_behind_and_accepts_a_newer_releases(
    store: HelperStore,  # noqa: F811
) -> None:
    """Rolling upgrades: a store behind this code's migrations is refused with a message naming both revisions;
    one migrated by a newer release (a revision this code does not know) is used, since migrations only expand
    until no process needs what a later one removes."""
    await check_schema(store.engine)  # at head
    async with store.engine.begin() as connection:
        await connection.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    with pytest.raises(SchemaNotCurrent, match=f"at 0001, this code needs {REVISIONS[-1]}"):
        await check_schema(store.engine)
    async with store.engine.begin() as connection:
        await connection.execute(text("UPDATE alembic_version SET version_num = '0099_from_a_newer_release'"))
    await check_schema(store.engine)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_a_first_release_store_migrates_with_its_rows(backend: str, tmp_path: Path) -> None:
    """The first release's schema (0001) with rows in it takes every migration since: rows intact, reads answer."""
    async with contextlib.AsyncExitStack() as scope:
        if backend == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / 'helpers.sqlite3'}"
        else:
            url = await scope.enter_async_context(fresh_postgres_database(POSTGRES_URL))
        engine = create_engine(StoreAddress.parse(url), creates=True)
        scope.push_async_callback(engine.dispose)
        await migrate(engine, "0001")
        old = HelperStore(engine)
        # The row as the first release wrote it: only the columns of 0001.
        first_release_columns = {
            name: value
            for name, value in to_columns(row("h1", seq=1, state=RowState.UNREPORTED)).items()
            if name
            not in (
                "follow_up_of",
                "followed_up_by",
                "follow_started_at",
                "choices",
                "wait_ends_at",
                "wait_reminders_ms",
                "granted_action",
            )
        }
        async with engine.begin() as connection:
            await connection.execute(insert(HelperRowRecord).values(**first_release_columns))
        with pytest.raises(SchemaNotCurrent):
            await check_schema(engine)
        await migrate(engine)
        await check_schema(engine)
        assert [r.helper_id for r in await old.reads.views("anna", UNREPORTED)] == ["h1"]


def test_the_spelled_out_revisions_are_the_migrations() -> None:
    """`store.database.REVISIONS` (read without loading alembic) lists the migrations folder's revisions in order."""
    from alembic.script import ScriptDirectory

    from store.database import REVISIONS, _config

    walked = [script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()]
    assert tuple(reversed(walked)) == REVISIONS
