"""The store's one interface: the guarded writes of helper rows for activities, and their typed reads for the
worker, the starter and Iva (R27). Each write is one transaction on SQLAlchemy's async engine (aiosqlite or
asyncpg), committed when its block ends and rolled back when it raises or is cancelled.

Writers pass the row's admission `seq` and their `generation`. A state write applies only while the
stored generation is not newer (the same generation again is an idempotent retry); a progress write
applies only at exactly the running generation. Both return whether they applied, so a stale writer
learns it lost without changing anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

from sqlalchemy import ColumnElement, and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from config.store_address import StoreAddress
from domain.audit import WaitEnd
from domain.limits import Limits
from domain.messages.activities import FollowedUp
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from domain.work import Usage
from observability.recording import BY_CALLER, store_write
from store.database import check_schema, create_engine, migrate
from store.reads import Marks, Query, Records, RowReader, helper_row
from store.records import KeptSession, ParkedSession
from store.statements import (
    SHOWN_COLUMNS,
    WRITABLE,
    Prepared,
    RowChanges,
    admission_of,
    events_table,
    follow_replica_update,
    insert_or_skip,
    kept_table,
    link_follow_up,
    now,
    parked_table,
    plain,
    progress_update,
    replicas_table,
    row_insert,
    row_table,
    state_update,
    to_columns,
    to_kept,
    upsert,
    usage_table,
    utc,
    wait_record,
    wait_table,
)

__all__ = ["WRITABLE", "HelperStore", "RowChanges", "RowGone", "RowOfAnotherAdmission", "row_table"]


# What a store call raises when the store is down, unreachable or restarting, or does not answer within a caller's
# bound: a caller that can go on without the store catches these, and nothing else.
STORE_FAULTS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError, TimeoutError)


class RowGone(LookupError):
    """The row of this admission is no longer there (removed, or its id admitted again)."""

    def __init__(self, owner: str, helper_id: str, seq: int) -> None:
        super().__init__(f"row {owner}/{helper_id}#{seq} is gone")


class RowOfAnotherAdmission(ValueError):
    """The row under this helper id belongs to another admission (`seq`; -1 if it vanished meanwhile)."""

    def __init__(self, owner: str, helper_id: str, seq: int) -> None:
        super().__init__(f"row {owner}/{helper_id} exists with another admission (#{seq})")
        self.seq = seq


# The parameter styles of the drivers the runtime ships (aiosqlite, asyncpg), in which `store.reads` writes its SQL.
_MARKS: dict[str, Marks] = {"qmark": "qmark", "numeric_dollar": "numeric_dollar"}


class HelperStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # A write of one statement needs no transaction around it: one round trip instead of three (BEGIN, the
        # statement, COMMIT), so a follow's write holds its pooled connection a third as long, and costs a fifth
        # less of the worker's CPU (measured on PostgreSQL: 0.32 ms instead of 0.40 ms a write).
        self._one_statement = engine.execution_options(isolation_level="AUTOCOMMIT")
        marks = _MARKS.get(engine.dialect.paramstyle)
        if marks is None:
            raise ValueError(f"the store's driver {engine.dialect.driver} is not one the runtime ships")
        # The reads of rows, views, places and usage: the SQL and decoding the starter's bare readers share.
        self.reads = RowReader(marks, self._fetch, self.close)

    @classmethod
    async def connect(cls, address: StoreAddress | str, *, run_migrations: bool = False) -> HelperStore:
        """Open the store. With `run_migrations` bring its schema up to date first, creating the store if it is
        not there; without, check that it is there (`NoStore`) and current (`SchemaNotCurrent`; production runs
        `python -m store migrate`)."""
        if isinstance(address, str):
            address = StoreAddress.parse(address)
        engine = create_engine(address, creates=run_migrations)  # a store only read is never created
        try:
            store = cls(engine)
            if run_migrations:
                await migrate(engine)
            else:
                await check_schema(engine)
        except BaseException:
            await engine.dispose()
            raise
        return store

    async def close(self) -> None:
        await self.engine.dispose()

    async def _fetch(self, query: Query) -> Records:
        """One read of `store.reads`, its SQL as written there, on a connection of the engine's pool."""
        async with self.engine.connect() as connection:
            result = await connection.exec_driver_sql(query.sql, query.parameters)
            return [dict(record) for record in result.mappings()]

    # --- writes (activities only) -----------------------------------------------------------------

    @store_write("admit")
    async def insert_admitted(self, row: HelperRow, followed_up: FollowedUp | None = None) -> bool:
        """Insert the admitted row (generation 1). False if the same admission was already written.

        A follow-up's earlier row is linked (and delivered, if it was unreported) in the same transaction."""

        try:
            async with self.engine.begin() as connection:
                await self._insert_admitted(connection, row, followed_up)
            return True
        except IntegrityError:
            pass  # a row under this id exists: the transaction, the link with it, is undone
        existing = await self.get(row.owner, row.helper_id)
        if existing is not None and existing.seq == row.seq:
            return False
        raise RowOfAnotherAdmission(row.owner, row.helper_id, -1 if existing is None else existing.seq)

    @store_write("admit")
    async def replace_unrecorded(self, row: HelperRow, followed_up: FollowedUp | None, unrecorded_seq: int) -> str:
        """Put this admission's row in place of the row of an admission its coordinator never recorded (a worker
        died between that row's write and the update's completion), in one transaction. Answers the replaced
        row's result directory; raises `RowOfAnotherAdmission` if the row under this id is not of
        `unrecorded_seq` (any more)."""
        key = (
            row_table.c.owner == row.owner,
            row_table.c.helper_id == row.helper_id,
            row_table.c.seq == unrecorded_seq,
        )

        try:
            async with self.engine.begin() as connection:
                replaced = await connection.execute(delete(row_table).where(*key).returning(row_table.c.result_dir))
                replaced_dir = replaced.scalar()
                if replaced_dir is not None:
                    await self._insert_admitted(connection, row, followed_up)
            if replaced_dir is not None:
                return str(replaced_dir)
        except IntegrityError:
            pass  # another admission's row appeared meanwhile: the transaction, the delete with it, is undone
        existing = await self.get(row.owner, row.helper_id)
        raise RowOfAnotherAdmission(row.owner, row.helper_id, -1 if existing is None else existing.seq)

    async def _insert_admitted(
        self, connection: AsyncConnection, row: HelperRow, followed_up: FollowedUp | None
    ) -> None:
        await connection.execute(*row_insert(row_table, to_columns(row)))
        if followed_up is not None:
            if followed_up.ended is not None:  # as the owner saw it, before the link delivers it
                await self._record_wait_ends(connection, row.owner, [followed_up.ended])
            await connection.execute(link_follow_up(row, followed_up))

    async def _record_wait_ends(self, connection: AsyncConnection, owner: str, ends: Sequence[WaitEnd]) -> None:
        """Each wait's record, with what its row shows, in the transaction of the write that ends it (R56). A row
        already gone was recorded by the attempt that removed it; a record already there stays as it is."""
        for end in ends:
            found = await connection.execute(select(*SHOWN_COLUMNS).where(*admission_of(owner, end.helper_id, end.seq)))
            shown = found.mappings().first()
            if shown is not None:
                await connection.execute(
                    *insert_or_skip(self.engine.dialect.name, wait_table, wait_record(owner, end, dict(shown)))
                )

    @store_write(BY_CALLER, counts_conflicts=True)
    async def write_state(
        self,
        owner: str,
        helper_id: str,
        seq: int,
        generation: int,
        ended: WaitEnd | None = None,
        **changes: Unpack[RowChanges],
    ) -> bool:
        """A guarded state write; with `ended`, the record of the wait it ends, in the same transaction (R56)."""
        statement = state_update(owner, helper_id, seq, generation, changes)
        async with self.engine.begin() as connection:
            written = bool((await connection.execute(*statement)).rowcount)
            if ended is not None:
                await self._record_wait_ends(connection, owner, [ended])
            return written

    @store_write(BY_CALLER)
    async def start_running(
        self, owner: str, helper_id: str, seq: int, generation: int, started_at: datetime, deadline_at: datetime
    ) -> HelperRow | None:
        """Mark the admission's row running and answer with it as written, in one statement (UPDATE …
        RETURNING); None when the write did not apply (the row is gone, or a newer generation wrote it)."""
        changes: RowChanges = {"state": RowState.RUNNING, "started_at": started_at, "deadline_at": deadline_at}
        statement = state_update(owner, helper_id, seq, generation, changes, returning=True)
        async with self.engine.begin() as connection:
            record = (await connection.execute(*statement)).mappings().first()
        return None if record is None else helper_row(record)

    @store_write("progress", counts_conflicts=True)
    async def write_progress(
        self, owner: str, helper_id: str, seq: int, generation: int, usage: Usage, last_message: str | None
    ) -> bool:
        values: dict[str, Any] = {
            "steps": usage.steps,
            "work_tokens": usage.work_tokens,
            "input_tokens": usage.input_tokens,
            "updated_at": now(),
        }
        if last_message is not None:
            values["last_message"] = last_message
        statement = progress_update(owner, helper_id, seq, generation, values)
        async with self._one_statement.connect() as connection:
            return bool((await connection.execute(*statement)).rowcount)

    @store_write("progress")
    async def record_follow_replica(
        self, owner: str, helper_id: str, seq: int, generation: int, replica: str | None, *, starts_following: bool
    ) -> bool:
        """Record which replica's follow attempt runs the running row's session now; with `starts_following`, also
        that a worker began following it, once: a later follow (after a finish-now, or on another replica) keeps
        the first moment."""
        statement = follow_replica_update(
            owner, helper_id, seq, generation, replica, now() if starts_following else None
        )
        async with self._one_statement.connect() as connection:
            return bool((await connection.execute(*statement)).rowcount)

    # --- the follows' replicas (R46): each says it is alive; a silent one's follows start again elsewhere ---------

    @store_write("replica")
    async def beat_replica(self, identity: str) -> bool:
        """This replica is alive now. False when its record was not there: its first beat, or another replica took
        it for dead (`claim_silent_replicas`) and started its follows again elsewhere."""
        values = {"identity": identity, "beat_at": now()}
        async with self.engine.begin() as connection:
            found = await connection.execute(
                update(replicas_table).where(replicas_table.c.identity == identity).values(beat_at=values["beat_at"])
            )
            if found.rowcount:
                return True
            await connection.execute(*upsert(self.engine.dialect.name, replicas_table, values, "identity"))
            return False

    async def claim_silent_replicas(self, silent_since: datetime, *, besides: str) -> list[str]:
        """The replicas silent since `silent_since`, each taken by this caller alone: its record is deleted, and a
        record another caller deleted first is not returned here."""
        async with self.engine.begin() as connection:
            taken = await connection.execute(
                delete(replicas_table)
                .where(replicas_table.c.beat_at < silent_since, replicas_table.c.identity != besides)
                .returning(replicas_table.c.identity)
            )
            return [identity for (identity,) in taken]

    async def follows_without_live_replica(self) -> list[tuple[str, str, str | None]]:
        """The running helpers (owner, helper id, the replica their row names) whose row names no live replica: none
        (no attempt recorded itself yet) or one whose record is gone (taken for dead, or stopped)."""
        live = select(replicas_table.c.identity)
        async with self.engine.connect() as connection:
            found = await connection.execute(
                select(row_table.c.owner, row_table.c.helper_id, row_table.c.follow_replica).where(
                    row_table.c.state == RowState.RUNNING.value,
                    or_(row_table.c.follow_replica.is_(None), row_table.c.follow_replica.not_in(live)),
                )
            )
            return [(owner, helper_id, replica) for owner, helper_id, replica in found]

    @store_write("replica")
    async def forget_replica(self, identity: str) -> None:
        """A replica that stops by itself hands its follows over: nobody need look for them."""
        async with self.engine.begin() as connection:
            await connection.execute(delete(replicas_table).where(replicas_table.c.identity == identity))

    @store_write("audit")
    async def forget_wait_records(self, ended_before: datetime) -> int:
        async with self.engine.begin() as connection:
            result = await connection.execute(delete(wait_table).where(wait_table.c.ended_at < utc(ended_before)))
            return int(result.rowcount)

    @store_write("remove")
    async def remove_rows(
        self,
        owner: str,
        helper_ids: Sequence[str],
        seqs: Mapping[str, int] | None = None,
        ended: Sequence[WaitEnd] = (),
    ) -> list[str]:
        """Delete rows; returns the result directories they pointed at. With `seqs` (helper id -> seq), a row is
        deleted only if it is of that admission: a row a later or lost admission wrote under the same id stays.
        `ended`: the waits the removal ends, recorded from their rows in the same transaction (R56)."""
        if not helper_ids:
            return []
        named: ColumnElement[bool] = row_table.c.helper_id.in_(helper_ids)
        if seqs is not None:
            named = or_(
                *(
                    and_(row_table.c.helper_id == helper_id, row_table.c.seq == seqs[helper_id])
                    for helper_id in helper_ids
                )
            )

        async with self.engine.begin() as connection:
            await self._record_wait_ends(connection, owner, ended)
            found = await connection.execute(select(row_table.c.result_dir).where(row_table.c.owner == owner, named))
            directories = [str(d) for d in found.scalars()]
            await connection.execute(delete(row_table).where(row_table.c.owner == owner, named))
        return directories

    @store_write(BY_CALLER, counts_conflicts=True)
    async def write_outcome(
        self,
        row: HelperRow,
        generation: int,
        usage: Usage,
        **changes: Unpack[RowChanges],
    ) -> bool:
        """The finalizer's write: the row (as `write_state`, with its outcome kind and finish time) and, if it
        applied, the usage line, in one transaction. A retried finalization adds no second line."""
        kind, finished_at = changes.get("outcome_kind"), changes.get("finished_at")
        if kind is None or finished_at is None:
            raise ValueError("an outcome is written with its outcome_kind and finished_at")
        statement = state_update(row.owner, row.helper_id, row.seq, generation, changes)
        usage_line = self._usage_line(row, kind, usage, finished_at)

        async with self.engine.begin() as connection:
            if not (await connection.execute(*statement)).rowcount:
                return False
            await connection.execute(*usage_line)
        return True

    def _usage_line(self, row: HelperRow, kind: OutcomeKind, usage: Usage, finished_at: datetime) -> Prepared:
        """Usage is recorded once per admission: a second line for it is ignored, not an error (an error would
        end a PostgreSQL transaction, and with it the row write beside it)."""
        values = {
            "owner": row.owner,
            "helper_id": row.helper_id,
            "seq": row.seq,
            "goal_id": row.goal_id,
            "model": row.model,
            "outcome_kind": kind.value,
            "steps": usage.steps,
            "work_tokens": usage.work_tokens,
            "input_tokens": usage.input_tokens,
            "started_at": utc(row.started_at) if row.started_at else None,
            "finished_at": utc(finished_at),
        }
        return insert_or_skip(self.engine.dialect.name, usage_table, values)

    @store_write("chat_event")
    async def record_event(
        self,
        *,
        owner: str,
        key: str,
        helper_ids: list[str],
        state: str,
        attempts: int,
        receipt_id: str | None,
        last_error: str | None,
    ) -> None:
        table = events_table
        values = {
            "owner": owner,
            "helper_ids": helper_ids,
            "state": state,
            "attempts": attempts,
            "receipt_id": receipt_id,
            "last_error": last_error,
            "updated_at": now(),
        }
        async with self.engine.begin() as connection:
            await connection.execute(*upsert(self.engine.dialect.name, table, {"key": key, **values}, "key"))

    @store_write("chat_event")
    async def set_event_state(self, owner: str, key: str, state: str) -> None:
        """Change a chat event's state only (a withdrawn event keeps its attempts and last error)."""
        table = events_table
        named = (table.c.owner == owner, table.c.key == key)
        async with self.engine.begin() as connection:
            await connection.execute(update(table).where(*named).values(state=state, updated_at=now()))

    @store_write("park")
    async def record_parked(self, owner: str, helper_id: str, session_id: str, error: str) -> None:
        table = parked_table
        async with self.engine.begin() as connection:
            await connection.execute(delete(table).where(table.c.session_id == session_id))
            await connection.execute(
                insert(table).values(
                    session_id=session_id, owner=owner, helper_id=helper_id, error=error, parked_at=now()
                )
            )

    @store_write("park")
    async def forget_parked(self, session_id: str) -> None:
        """A parked session was reset after all (or the core no longer knows it): no longer parked."""
        async with self.engine.begin() as connection:
            await connection.execute(delete(parked_table).where(parked_table.c.session_id == session_id))

    @store_write("keep")
    async def keep_session(self, owner: str, helper_id: str, seq: int, session_id: str) -> None:
        """List a session kept for a follow-up; keeping it again (a retried activity) changes nothing."""

        statement = insert(kept_table).values(
            session_id=session_id, owner=owner, helper_id=helper_id, seq=seq, kept_at=now()
        )
        try:
            async with self.engine.begin() as connection:
                await connection.execute(statement)
        except IntegrityError:
            pass  # kept already

    @store_write("keep")
    async def forget_kept(self, session_id: str) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(delete(kept_table).where(kept_table.c.session_id == session_id))

    # --- reads ------------------------------------------------------------------------------------

    async def kept_sessions(self, limit: int = 1_000) -> list[KeptSession]:
        """The oldest kept sessions first, at most `limit` (one sweep's share)."""
        statement = select(kept_table).order_by(kept_table.c.kept_at).limit(limit)
        async with self.engine.connect() as connection:
            result = await connection.execute(statement)
            return [to_kept(record) for record in result.mappings()]

    async def kept_session_of(self, owner: str, helper_id: str) -> KeptSession | None:
        statement = select(kept_table).where(kept_table.c.owner == owner, kept_table.c.helper_id == helper_id)
        async with self.engine.connect() as connection:
            record = (await connection.execute(statement)).mappings().first()
        return None if record is None else to_kept(record)

    async def admitted(self, owner: str, helper_id: str, seq: int) -> HelperRow:
        """The row of exactly this admission, or `RowGone`."""
        row = await self.get(owner, helper_id)
        if row is None or row.seq != seq:
            raise RowGone(owner, helper_id, seq)
        return row

    async def get(self, owner: str, helper_id: str) -> HelperRow | None:
        return await self.reads.get(owner, helper_id)

    async def parked_sessions(self, limit: int) -> list[ParkedSession]:
        """Parked sessions of every owner, the oldest first, at most `limit` (one sweep's share)."""
        table = parked_table
        async with self.engine.connect() as connection:
            result = await connection.execute(select(table).order_by(table.c.parked_at).limit(limit))
            return [ParkedSession.model_validate(plain(record)) for record in result.mappings()]

    async def count_by_state(self) -> dict[str, int]:
        """How many rows the whole store holds in each state (the worker's gauges)."""
        async with self.engine.connect() as connection:
            counted = await connection.execute(select(row_table.c.state, func.count()).group_by(row_table.c.state))
            return {str(state): int(count) for state, count in counted.all()}

    async def running_hard_ceilings(self) -> list[datetime]:
        """The hard ceiling of every running helper whose session opened (R15; one still opening has no deadline).
        The grace lives in the row's JSON limits, so the moment is computed here rather than in SQL that SQLite and
        PostgreSQL would spell differently."""
        statement = select(row_table.c.deadline_at, row_table.c.limits).where(
            row_table.c.state == RowState.RUNNING.value, row_table.c.deadline_at.is_not(None)
        )
        async with self.engine.connect() as connection:
            running = (await connection.execute(statement)).all()
        return [
            (Limits.model_validate(limits) if isinstance(limits, dict) else Limits()).hard_ceiling_at(utc(deadline_at))
            for deadline_at, limits in running
        ]

    async def result_dirs(self) -> set[str]:
        async with self.engine.connect() as connection:
            result = await connection.execute(select(row_table.c.result_dir))
            return {str(d) for d in result.scalars()}
