"""The goal this second read path serves: the starter's read commands ≤ ×10 a bare interpreter start
(python -m tools.bench.starter).

The starter's reads on the bare drivers, the stdlib `sqlite3` for `sqlite+aiosqlite://` stores and `asyncpg` for
`postgresql+asyncpg://` ones, without SQLAlchemy, whose import alone takes a read command past that goal (R43).

The SQL of every read lives here, once; `tests/store/test_row_reads.py` writes rows through `HelperStore` and
reads them back through both paths on both engines, so the two cannot drift. A URL this module does not take
(a query string, another driver, an in-memory database) returns None from `bare_store_address`, and the caller
uses `HelperStore`.
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from domain.rows import HelperRow, HelperView, RowState
from store.records import UsageLine
from store.revisions import check_revision

if TYPE_CHECKING:
    import sqlite3

# The columns of the reads, in the tables' order (a test checks them against store/schema.py).
HELPER_ROW_COLUMNS = (
    "owner",
    "helper_id",
    "seq",
    "goal_id",
    "state",
    "task",
    "boundary",
    "language",
    "model",
    "limits",
    "session_id",
    "steps",
    "work_tokens",
    "input_tokens",
    "last_message",
    "outcome_kind",
    "summary",
    "actions",
    "result_dir",
    "admitted_at",
    "started_at",
    "deadline_at",
    "finished_at",
    "delivered_at",
    "keep_until",
    "generation",
    "updated_at",
    "follow_up_of",
    "followed_up_by",
    "follow_started_at",
)
USAGE_COLUMNS = (
    "owner",
    "helper_id",
    "seq",
    "goal_id",
    "model",
    "outcome_kind",
    "steps",
    "work_tokens",
    "input_tokens",
    "started_at",
    "finished_at",
)
# What a listing shows of a row (`HelperView`'s columns) and `seq`, for a waiting helper's place: `list` and
# `unreported` read no more, so Iva's per-turn read decodes a third of the columns (R43).
VIEW_COLUMNS = (
    "seq",
    "helper_id",
    "state",
    "goal_id",
    "steps",
    "work_tokens",
    "input_tokens",
    "model",
    "outcome_kind",
    "summary",
    "admitted_at",
    "started_at",
    "deadline_at",
    "finished_at",
    "delivered_at",
    "result_dir",
    "actions",
    "follow_up_of",
    "followed_up_by",
    "follow_started_at",
)
JSON_COLUMNS = frozenset({"boundary", "limits", "actions"})
DATETIME_COLUMNS = frozenset(
    {
        "admitted_at",
        "started_at",
        "deadline_at",
        "finished_at",
        "delivered_at",
        "keep_until",
        "updated_at",
        "follow_started_at",
    }
)

Dialect = Literal["sqlite", "postgresql"]

# SQLAlchemy's own URL pattern (sqlalchemy.engine.url._parse_url), so a URL parses here exactly as it does there.
_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


@dataclass(frozen=True)
class BareStoreAddress:
    """Where a store is, as the bare driver connects to it."""

    dialect: Dialect
    sqlite_path: str = ""  # absolute, as SQLAlchemy's SQLite dialect opens it
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = None
    database: str | None = None


def bare_store_address(url: str) -> BareStoreAddress | None:
    """The address of a store URL the bare path takes; None for any other (the caller then uses SQLAlchemy).

    Only the two URL forms the runtime documents are taken, without a query string: whatever SQLAlchemy would do
    with a query (connect options, an SQLite URI) stays SQLAlchemy's.
    """
    match = _URL.match(url)
    if match is None or match.group("query") is not None or match.end() != len(url):
        return None
    parts = match.groupdict()
    database = unquote(parts["database"]) if parts["database"] is not None else None
    host = parts["ipv4host"] or parts["ipv6host"]
    if parts["name"] == "sqlite+aiosqlite":
        if parts["username"] is not None or host or parts["port"] or not database or database == ":memory:":
            return None
        return BareStoreAddress("sqlite", sqlite_path=os.path.abspath(database))
    if parts["name"] == "postgresql+asyncpg":
        port = parts["port"]
        if port and not port.isdigit():
            return None
        return BareStoreAddress(
            "postgresql",
            host=host,
            port=int(port) if port else None,
            user=unquote(parts["username"]) if parts["username"] is not None else None,
            password=unquote(parts["password"]) if parts["password"] is not None else None,
            database=database or None,
        )
    return None


# --- the SQL of each read, for one dialect's parameter style --------------------------------------------


def _marks(dialect: Dialect, count: int, first: int = 1) -> list[str]:
    return ["?"] * count if dialect == "sqlite" else [f"${number}" for number in range(first, first + count)]


def rows_query(
    dialect: Dialect, owner: str, states: Sequence[str] | None, columns: Sequence[str] = HELPER_ROW_COLUMNS
) -> tuple[str, list[Any]]:
    """One owner's rows (in some states), in admission order: the owner-first index (R43)."""
    sql = f"SELECT {', '.join(columns)} FROM helper_rows WHERE owner = {_marks(dialect, 1)[0]}"
    parameters: list[Any] = [owner]
    if states is not None:
        sql += f" AND state IN ({', '.join(_marks(dialect, len(states), 2))})" if states else " AND 1 = 0"
        parameters += list(states)
    return sql + " ORDER BY seq", parameters


def row_query(dialect: Dialect, owner: str, helper_id: str) -> tuple[str, list[Any]]:
    owner_mark, id_mark = _marks(dialect, 2)
    columns = ", ".join(HELPER_ROW_COLUMNS)
    sql = f"SELECT {columns} FROM helper_rows WHERE owner = {owner_mark} AND helper_id = {id_mark}"
    return sql, [owner, helper_id]


def ahead_query(dialect: Dialect, owner: str, seq: int) -> tuple[str, list[Any]]:
    """Waiting helpers admitted before `seq`: a place in the queue (R4, R6)."""
    owner_mark, state_mark, seq_mark = _marks(dialect, 3)
    sql = f"SELECT count(*) FROM helper_rows WHERE owner = {owner_mark} AND state = {state_mark} AND seq < {seq_mark}"
    return sql, [owner, RowState.WAITING.value, seq]


def usage_query(dialect: Dialect, owner: str) -> tuple[str, list[Any]]:
    sql = f"SELECT {', '.join(USAGE_COLUMNS)} FROM helper_usage WHERE owner = {_marks(dialect, 1)[0]} ORDER BY seq"
    return sql, [owner]


REVISION_QUERY = "SELECT version_num FROM alembic_version"


# --- decoding: what SQLAlchemy's column types do on each engine ----------------------------------------


def _moment(value: Any) -> datetime | None:
    # SQLite keeps a moment as text without its offset; everything the store writes is UTC.
    if value is None:
        return None
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _decoded(record: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(record)
    for name in JSON_COLUMNS & data.keys():
        if isinstance(data[name], str):  # both drivers hand a JSON column over as its text
            data[name] = json.loads(data[name])
    for name in DATETIME_COLUMNS & data.keys():
        data[name] = _moment(data[name])
    return data


def helper_row(record: Mapping[str, Any]) -> HelperRow:
    """A helper row as `HelperStore` decodes it."""
    return HelperRow.model_validate(_decoded(record))


def listed_views(records: Iterable[Mapping[Any, Any]]) -> list[HelperView]:
    """A listing from records of `VIEW_COLUMNS` (from either driver, or SQLAlchemy's), each waiting helper with its
    place in the queue: the waiting helpers admitted before it (R4, R6)."""
    decoded = [_decoded(record) for record in records]
    waiting = [data["seq"] for data in decoded if data["state"] == RowState.WAITING.value]
    views = []
    for data in decoded:
        seq = data.pop("seq")
        if data["state"] == RowState.WAITING.value:
            data["ahead"] = sum(1 for other in waiting if other < seq)
        views.append(HelperView.model_validate(data))
    return views


def usage_line(record: Mapping[str, Any]) -> UsageLine:
    return UsageLine.model_validate(_decoded(record))


# --- the two readers ------------------------------------------------------------------------------------


class RowReader(ABC):
    """The reads, the same on both drivers: each reader gives its dialect, how to run one query for its rows or
    for one value, and how to close."""

    dialect: Dialect

    @abstractmethod
    async def _records(self, sql: str, parameters: list[Any]) -> list[dict[str, Any]]:
        """The query's rows, each as a mapping of column name to value."""

    @abstractmethod
    async def _value(self, sql: str, parameters: list[Any]) -> Any:
        """The first column of the query's first row."""

    @abstractmethod
    async def close(self) -> None:
        """Close the connection (or the pool)."""

    async def rows(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperRow]:
        values = None if states is None else [state.value for state in states]
        return [helper_row(record) for record in await self._records(*rows_query(self.dialect, owner, values))]

    async def views(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperView]:
        values = None if states is None else [state.value for state in states]
        return listed_views(await self._records(*rows_query(self.dialect, owner, values, VIEW_COLUMNS)))

    async def get(self, owner: str, helper_id: str) -> HelperRow | None:
        records = await self._records(*row_query(self.dialect, owner, helper_id))
        return helper_row(records[0]) if records else None

    async def ahead(self, owner: str, seq: int) -> int:
        return int(await self._value(*ahead_query(self.dialect, owner, seq)))

    async def usage(self, owner: str) -> list[UsageLine]:
        return [usage_line(record) for record in await self._records(*usage_query(self.dialect, owner))]

    async def ping(self) -> None:
        """One `SELECT 1` round trip (through the pool, when it is one): whether the store answers."""
        await self._value("SELECT 1", [])


class SqliteRowReader(RowReader):
    """Reads on the stdlib `sqlite3`. Opened for the console script (`threaded=False`), its coroutines never
    suspend, so `starter.cli` runs them without loading asyncio; opened for a process with an event loop
    (`threaded=True`: `watch`, `HelperClient`), each query runs in a worker thread, as aiosqlite's do, so a
    writer's lock never stalls the loop."""

    dialect: Dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection, *, threaded: bool = False) -> None:
        self._connection = connection
        self._threaded = threaded

    @classmethod
    def open(cls, path: str, *, threaded: bool = False) -> SqliteRowReader:
        """Open the store at `path` and check its schema (`SchemaNotCurrent`), as `HelperStore.connect` does."""
        import sqlite3

        # As store.database.create_engine: the folder is created, and a busy writer is waited for up to 30 s.
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=30, check_same_thread=not threaded)
        try:
            try:
                found = connection.execute(REVISION_QUERY).fetchone()
            except sqlite3.OperationalError as error:
                if "no such table" not in str(error):
                    raise  # not a database, locked, unreadable: the caller lets SQLAlchemy's path word it
                found = None  # no version table: nothing was ever migrated
            check_revision(None if found is None else found[0])
        except BaseException:
            connection.close()
            raise
        return cls(connection, threaded=threaded)

    def _fetch(self, sql: str, parameters: list[Any]) -> list[dict[str, Any]]:
        cursor = self._connection.execute(sql, parameters)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]

    async def _records(self, sql: str, parameters: list[Any]) -> list[dict[str, Any]]:
        if not self._threaded:
            return self._fetch(sql, parameters)
        import asyncio

        return await asyncio.to_thread(self._fetch, sql, parameters)

    async def _value(self, sql: str, parameters: list[Any]) -> Any:
        return next(iter((await self._records(sql, parameters))[0].values()))

    async def close(self) -> None:
        self._connection.close()


class PostgresRowReader(RowReader):
    """Reads on `asyncpg`: one connection, or a pool for a process that reads concurrently (the HTTP service)."""

    dialect: Dialect = "postgresql"

    def __init__(self, connection: Any) -> None:  # an asyncpg.Connection or Pool (asyncpg ships no type hints)
        self._connection = connection

    @classmethod
    async def open(cls, address: BareStoreAddress, pool_size: int | None = None) -> PostgresRowReader:
        """Connect as SQLAlchemy's asyncpg dialect would with this URL and check the schema (`SchemaNotCurrent`)."""
        import asyncpg  # type: ignore[import-untyped]

        # A pool answers `fetch` and `fetchval` as a connection does, each on a connection of its own.
        connect = asyncpg.connect if pool_size is None else partial(asyncpg.create_pool, min_size=1, max_size=pool_size)
        connection = await connect(
            host=address.host,
            port=address.port,
            user=address.user,
            password=address.password,
            database=address.database,
            # An owner's reads return at most a few dozen rows. Without column statistics (a restored dump, a table
            # just loaded, before autovacuum analyzes it) the planner guesses thousands per owner and starts
            # parallel workers for each `list`, many times slower than reading the owner's index alone.
            server_settings={"max_parallel_workers_per_gather": "0"},
        )
        try:
            try:
                current = await connection.fetchval(REVISION_QUERY)
            except asyncpg.PostgresError:  # no version table: nothing was ever migrated
                current = None
            check_revision(current)
        except BaseException:
            await connection.close()
            raise
        return cls(connection)

    async def _records(self, sql: str, parameters: list[Any]) -> list[dict[str, Any]]:
        return [dict(record) for record in await self._connection.fetch(sql, *parameters)]

    async def _value(self, sql: str, parameters: list[Any]) -> Any:
        return await self._connection.fetchval(sql, *parameters)

    async def close(self) -> None:
        await self._connection.close()


async def open_bare_reader(address: BareStoreAddress, pool_size: int | None = None) -> RowReader:
    """A reader on the bare driver of `address`, for a process with an event loop; `SchemaNotCurrent` when its schema
    is behind this code. With `pool_size`, PostgreSQL is read through a pool of that many connections."""
    if address.dialect == "sqlite":
        import asyncio

        # Opening waits for a busy writer too: in a worker thread, as every later query.
        return await asyncio.to_thread(SqliteRowReader.open, address.sqlite_path, threaded=True)
    return await PostgresRowReader.open(address, pool_size)
