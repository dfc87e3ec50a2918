"""The store's reads of rows, views, places in the queue and usage: each read's SQL is written here once and its
records are decoded here once, whichever driver runs it. `HelperStore` runs them on SQLAlchemy's engine (the worker,
and a URL no bare driver takes); the starter runs them on the bare drivers, the stdlib `sqlite3` and `asyncpg`,
without SQLAlchemy, whose import alone takes a read command past its goal: ≤ ×10 a bare interpreter's start (R43).

This module never loads SQLAlchemy; a reader loads its driver, and asyncio only if it runs in an event loop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from config.store_address import StoreAddress
from domain.audit import AuditCursor, OwnerWait, WaitKind, WaitRecord
from domain.messages.signals import AUTHORIZATION_QUESTION_ID, PLAIN_QUESTION_ID
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, HelperView, RowState
from store.records import UsageLine
from store.revisions import REVISION_QUERY, NoStore, check_revision, check_sqlite_file

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
    "choices",
    "wait_ends_at",
    "wait_reminders_ms",
    "granted_action",
)
# Columns of the row the runtime keeps for itself, which no read decodes: the replica a follow runs on
# (replica/liveness.py).
RUNTIME_ONLY_COLUMNS = frozenset({"follow_replica"})
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
    "choices",
    "granted_action",
)
# A wait's record (R56), in the table's order.
WAIT_RECORD_COLUMNS = (
    "owner",
    "helper_id",
    "seq",
    "session_id",
    "kind",
    "question_id",
    "ended",
    "ended_at",
    "reminders_sent",
    "answer",
    "asked_grant",
    "granted",
    "decided_by",
    "decided_via",
    "decided_through",
    "follow_up",
    "language",
    "shown_text",
    "shown_choices",
    "shown_sha256",
    "asked_at",
    "delivered_at",
)
JSON_COLUMNS = frozenset(
    {"boundary", "limits", "actions", "choices", "answer", "shown_choices", "wait_reminders_ms", "granted_action"}
)
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
        "ended_at",
        "asked_at",
        "wait_ends_at",
    }
)

# --- the SQL of each read, in the parameter marks of the driver that runs it --------------------------------

# The paramstyles of the drivers the runtime ships: the stdlib sqlite3 and aiosqlite (qmark), asyncpg
# (numeric_dollar, as SQLAlchemy's asyncpg dialect also takes them).
Marks = Literal["qmark", "numeric_dollar"]


@dataclass(frozen=True)
class Query:
    sql: str
    parameters: tuple[Any, ...] = ()


def _marks(style: Marks, count: int, first: int = 1) -> list[str]:
    return ["?"] * count if style == "qmark" else [f"${number}" for number in range(first, first + count)]


def rows_query(
    style: Marks, owner: str, states: Sequence[str] | None, columns: Sequence[str] = HELPER_ROW_COLUMNS
) -> Query:
    """One owner's rows (in some states), in admission order: the owner-first index (R43)."""
    sql = f"SELECT {', '.join(columns)} FROM helper_rows WHERE owner = {_marks(style, 1)[0]}"
    if states is not None:
        sql += f" AND state IN ({', '.join(_marks(style, len(states), 2))})" if states else " AND 1 = 0"
    return Query(sql + " ORDER BY seq", (owner, *(states or ())))


def row_query(style: Marks, owner: str, helper_id: str) -> Query:
    owner_mark, id_mark = _marks(style, 2)
    columns = ", ".join(HELPER_ROW_COLUMNS)
    return Query(
        f"SELECT {columns} FROM helper_rows WHERE owner = {owner_mark} AND helper_id = {id_mark}", (owner, helper_id)
    )


def ahead_query(style: Marks, owner: str, seq: int) -> Query:
    """Waiting helpers admitted before `seq`: a place in the queue (R4, R6)."""
    owner_mark, state_mark, seq_mark = _marks(style, 3)
    sql = f"SELECT count(*) FROM helper_rows WHERE owner = {owner_mark} AND state = {state_mark} AND seq < {seq_mark}"
    return Query(sql, (owner, RowState.WAITING.value, seq))


def usage_query(style: Marks, owner: str) -> Query:
    sql = f"SELECT {', '.join(USAGE_COLUMNS)} FROM helper_usage WHERE owner = {_marks(style, 1)[0]} ORDER BY seq"
    return Query(sql, (owner,))


def offered_events_query(style: Marks, owner: str, states: Sequence[str]) -> Query:
    """When each of the owner's events in these states last changed (the owner-first index on chat_events)."""
    owner_mark, *state_marks = _marks(style, 1 + len(states))
    sql = f"SELECT updated_at FROM chat_events WHERE owner = {owner_mark} AND state IN ({', '.join(state_marks)})"
    return Query(sql, (owner, *states))


# What the inbox shows of a row that asks (R56).
WAIT_COLUMNS = (
    "helper_id",
    "outcome_kind",
    "summary",
    "choices",
    "finished_at",
    "delivered_at",
    "wait_ends_at",
    "wait_reminders_ms",
)


def waits_query(style: Marks, owner: str) -> Query:
    """The owner's rows that ask and still take an answer: unreported or delivered, not followed up, and no record
    of an end (an answer that delivered the row, a denial). Owner first: the state index, then the record's key."""
    owner_mark, unreported, delivered, question, authorization = _marks(style, 5)
    columns = ", ".join(f"r.{column}" for column in WAIT_COLUMNS)
    sql = (
        f"SELECT {columns} FROM helper_rows r WHERE r.owner = {owner_mark}"
        f" AND r.state IN ({unreported}, {delivered}) AND r.outcome_kind IN ({question}, {authorization})"
        " AND r.followed_up_by IS NULL AND NOT EXISTS (SELECT 1 FROM wait_records w"
        " WHERE w.owner = r.owner AND w.helper_id = r.helper_id AND w.seq = r.seq) ORDER BY r.seq"
    )
    states = (RowState.UNREPORTED.value, RowState.DELIVERED.value)
    return Query(sql, (owner, *states, OutcomeKind.QUESTION.value, OutcomeKind.AUTHORIZATION.value))


def wait_records_query(
    style: Marks, owner: str, helper_id: str | None, before: AuditCursor | None, limit: int
) -> Query:
    """The owner's wait records, newest first, of one helper or all, after the page that ended at `before`: one
    range of the owner-first index (owner, ended_at, helper_id, seq), read backwards."""
    parameters: list[Any] = [owner]
    sql = f"SELECT {', '.join(WAIT_RECORD_COLUMNS)} FROM wait_records WHERE owner = {{}}"
    if helper_id is not None:
        sql += " AND helper_id = {}"
        parameters.append(helper_id)
    if before is not None:
        sql += " AND (ended_at, helper_id, seq) < ({}, {}, {})"
        parameters += [_moment(style, before.ended_at), before.helper_id, before.seq]
    sql += " ORDER BY ended_at DESC, helper_id DESC, seq DESC LIMIT {}"
    parameters.append(limit)
    return Query(sql.format(*_marks(style, len(parameters))), tuple(parameters))


def _moment(style: Marks, moment: datetime) -> Any:
    """A moment as a parameter compared with a stored one: asyncpg takes the datetime; SQLite compares the text
    SQLAlchemy stores (UTC, without its offset)."""
    utc = moment.astimezone(UTC)
    return utc if style == "numeric_dollar" else utc.strftime("%Y-%m-%d %H:%M:%S.%f")


# --- decoding: a record from any driver (JSON as its text or decoded, moments as text or datetime) ------------


def aware(value: Any) -> datetime | None:
    """A stored moment as an aware datetime: SQLite keeps it as text (or SQLAlchemy hands it over) without its
    offset, and everything the store writes is UTC."""
    if value is None:
        return None
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _decoded(record: Mapping[Any, Any]) -> dict[str, Any]:
    data = dict(record)
    for name in JSON_COLUMNS & data.keys():
        if isinstance(data[name], str):  # a driver's own value: the JSON's text
            data[name] = json.loads(data[name])
    for name in DATETIME_COLUMNS & data.keys():
        data[name] = aware(data[name])
    return data


def helper_row(record: Mapping[Any, Any]) -> HelperRow:
    return HelperRow.model_validate(_decoded(record))


def listed_views(records: Iterable[Mapping[Any, Any]]) -> list[HelperView]:
    """A listing from records of `VIEW_COLUMNS`, each waiting helper with its place in the queue: the waiting
    helpers admitted before it (R4, R6)."""
    decoded = [_decoded(record) for record in records]
    waiting = [data["seq"] for data in decoded if data["state"] == RowState.WAITING.value]
    views = []
    for data in decoded:
        seq = data.pop("seq")
        if data["state"] == RowState.WAITING.value:
            data["ahead"] = sum(1 for other in waiting if other < seq)
        views.append(HelperView.model_validate(data))
    return views


def owner_wait(record: Mapping[Any, Any], now: datetime) -> OwnerWait | None:
    """One wait of the inbox, or None for one past its bound (its expiry is being written)."""
    data = _decoded(record)
    ends_at, delivered_at = data["wait_ends_at"], data["delivered_at"]
    if ends_at is not None and ends_at <= now:
        return None
    choices = data["choices"]
    authorization = data["outcome_kind"] == OutcomeKind.AUTHORIZATION.value
    unnamed = AUTHORIZATION_QUESTION_ID if authorization else PLAIN_QUESTION_ID
    offsets = (data["wait_reminders_ms"] or []) if delivered_at is not None else []
    return OwnerWait(
        helper_id=data["helper_id"],
        kind=WaitKind.AUTHORIZATION if authorization else WaitKind.QUESTION,
        question_id=choices["question_id"] if choices else unnamed,
        text=data["summary"] or "",
        choices=choices,
        asked_at=data["finished_at"],
        delivered_at=delivered_at,
        reminders_sent=sum(1 for ms in offsets if delivered_at + timedelta(milliseconds=ms) <= now),
        expires_at=ends_at,
    )


def wait_record(record: Mapping[Any, Any]) -> WaitRecord:
    data = _decoded(record)
    data["decider"] = {
        "by": data.pop("decided_by"),
        "via": data.pop("decided_via"),
        "through": data.pop("decided_through"),
    }
    return WaitRecord.model_validate(data)


def usage_line(record: Mapping[Any, Any]) -> UsageLine:
    return UsageLine.model_validate(_decoded(record))


# --- the reads, on whichever driver runs their SQL ----------------------------------------------------------

Records = list[dict[str, Any]]
Fetch = Callable[[Query], Awaitable[Records]]


class RowReader:
    """The reads of one store. `fetch` runs one query on the driver and answers its records (column name to value);
    `close` lets go of the connection, the pool or the engine; `marks` is the driver's parameter style."""

    def __init__(self, marks: Marks, fetch: Fetch, close: Callable[[], Awaitable[None]]) -> None:
        self.marks: Marks = marks
        self.fetch = fetch
        self._close = close

    async def views(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperView]:
        """What `list` shows of one owner's rows (in some states): `VIEW_COLUMNS` only."""
        values = None if states is None else [state.value for state in states]
        return listed_views(await self.fetch(rows_query(self.marks, owner, values, VIEW_COLUMNS)))

    async def get(self, owner: str, helper_id: str) -> HelperRow | None:
        records = await self.fetch(row_query(self.marks, owner, helper_id))
        return helper_row(records[0]) if records else None

    async def ahead(self, owner: str, seq: int) -> int:
        """Waiting helpers admitted before `seq`: its place in the queue (R4, R6)."""
        [record] = await self.fetch(ahead_query(self.marks, owner, seq))
        return int(next(iter(record.values())))

    async def usage(self, owner: str) -> list[UsageLine]:
        return [usage_line(record) for record in await self.fetch(usage_query(self.marks, owner))]

    async def waits(self, owner: str) -> list[OwnerWait]:
        """Every wait of the owner's that still takes an answer (R56), in admission order."""
        now = datetime.now(UTC)
        waits = (owner_wait(record, now) for record in await self.fetch(waits_query(self.marks, owner)))
        return [wait for wait in waits if wait is not None]

    async def wait_records(
        self, owner: str, helper_id: str | None = None, *, before: AuditCursor | None = None, limit: int = 50
    ) -> list[WaitRecord]:
        """The records of the owner's waits that ended (R56), newest first; of one helper with `helper_id`; after
        the record `before` names (the last of the page before)."""
        records = await self.fetch(wait_records_query(self.marks, owner, helper_id, before, limit))
        return [wait_record(record) for record in records]

    async def event_offered_since(self, owner: str, states: Sequence[str], since: datetime) -> bool:
        """Whether one of the owner's chat events in these states changed after `since`: one the outbox still
        offers. The owner's few open events are compared here, so every driver's moments compare alike."""
        records = await self.fetch(offered_events_query(self.marks, owner, states))
        return any((moment := aware(record["updated_at"])) is not None and moment > since for record in records)

    async def ping(self) -> None:
        """One `SELECT 1` round trip (through the pool, when it is one): whether the store answers."""
        await self.fetch(Query("SELECT 1"))

    async def close(self) -> None:
        await self._close()


# --- the bare drivers -------------------------------------------------------------------------------------


def open_sqlite(address: StoreAddress, *, threaded: bool = False) -> RowReader:
    """The SQLite store of `address` on the stdlib `sqlite3`, checked as `HelperStore.connect` checks it: `NoStore`
    when its file is not there (nothing is created), `SchemaNotCurrent` when its schema is behind. Opened for the
    console script (`threaded=False`), its reads never suspend, so `starter.cli` runs them without loading asyncio;
    opened for a process with an event loop (`threaded=True`: `watch`, `HelperClient`, the service), each query
    runs in a worker thread, as aiosqlite's do, so a writer's lock never stalls the loop."""
    import sqlite3

    check_sqlite_file(address.sqlite_path())
    # As store.database.create_engine: never created here (mode=rw), and a busy writer is waited for up to 30 s.
    connection = sqlite3.connect(address.sqlite_uri(), uri=True, timeout=30, check_same_thread=not threaded)
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
    run = partial(_sqlite_records, connection)

    async def fetch(query: Query) -> Records:
        if not threaded:
            return run(query)
        import asyncio

        return await asyncio.to_thread(run, query)

    async def close() -> None:
        connection.close()

    return RowReader("qmark", fetch, close)


def _sqlite_records(connection: sqlite3.Connection, query: Query) -> Records:
    cursor = connection.execute(query.sql, query.parameters)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


async def open_postgres(address: StoreAddress, pool_size: int | None = None) -> RowReader:
    """The PostgreSQL store on `asyncpg`, connected as SQLAlchemy's asyncpg dialect would and checked: `NoStore`
    when its database is not there, `SchemaNotCurrent` when its schema is behind. One connection, or with
    `pool_size` a pool of that many (the HTTP service)."""
    import asyncpg  # type: ignore[import-untyped]

    # A pool answers `fetch` as a connection does, each on a connection of its own.
    connect = asyncpg.connect if pool_size is None else partial(asyncpg.create_pool, min_size=1, max_size=pool_size)
    try:
        connection = await connect(
            **address.asyncpg_arguments(),
            # An owner's reads return at most a few dozen rows. Without column statistics (a restored dump, a table
            # just loaded, before autovacuum analyzes it) the planner guesses thousands per owner and starts
            # parallel workers for each `list`, many times slower than reading the owner's index alone.
            server_settings={"max_parallel_workers_per_gather": "0"},
        )
    except asyncpg.InvalidCatalogNameError:
        raise NoStore.database(address.database) from None
    try:
        try:
            current = await connection.fetchval(REVISION_QUERY)
        except asyncpg.PostgresError:  # no version table: nothing was ever migrated
            current = None
        check_revision(current)
    except BaseException:
        await connection.close()
        raise

    async def fetch(query: Query) -> Records:
        return [dict(record) for record in await connection.fetch(query.sql, *query.parameters)]

    return RowReader("numeric_dollar", fetch, connection.close)


async def open_bare(address: StoreAddress, pool_size: int | None = None) -> RowReader:
    """A reader on the bare driver of `address` (`address.bare` must name one), for a process with an event loop;
    `NoStore` when there is none at the address, `SchemaNotCurrent` when its schema is behind this code. With
    `pool_size`, PostgreSQL is read through a pool."""
    if address.bare == "sqlite":
        import asyncio

        # Opening waits for a busy writer too: in a worker thread, as every later query.
        return await asyncio.to_thread(open_sqlite, address, threaded=True)
    return await open_postgres(address, pool_size)
