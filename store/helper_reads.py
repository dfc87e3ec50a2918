"""The store's reads: one owner's rows and views for the starter and Iva (R27, R43), and what the worker reads
back. A mixin of `HelperStore` (store/helper_store.py), kept apart so each file says one thing; on a SQLite file
the listings and the one-row read run on the store's own thread (`store/transactions.py`)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from domain.rows import HelperRow, HelperView, RowState
from store.records import ChatEvent, ParkedSession, UsageLine
from store.row_reads import listed_views
from store.statements import (
    events_table,
    owner_rows,
    parked_table,
    plain,
    row_by_key,
    row_table,
    to_row,
    usage_table,
)
from store.transactions import Transactions


class HelperReads:
    """The reads of `HelperStore`; the attributes are the store's."""

    engine: AsyncEngine
    transactions: Transactions

    async def get(self, owner: str, helper_id: str) -> HelperRow | None:
        statement = row_by_key(owner, helper_id)

        def read(connection: Connection) -> HelperRow | None:
            record = connection.execute(*statement).mappings().first()
            return None if record is None else to_row(record)

        return await self.transactions.read(read)

    async def rows(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperRow]:
        statement = owner_rows(owner, states)

        def read(connection: Connection) -> list[HelperRow]:
            return [to_row(record) for record in connection.execute(*statement).mappings()]

        return await self.transactions.read(read)

    async def views(self, owner: str, states: Iterable[RowState] | None = None) -> list[HelperView]:
        """What `list` shows of one owner's rows (in some states): `store.row_reads.VIEW_COLUMNS` only."""
        statement = owner_rows(owner, states, view=True)

        def read(connection: Connection) -> list[HelperView]:
            return listed_views(connection.execute(*statement).mappings())

        return await self.transactions.read(read)

    async def ahead(self, owner: str, seq: int) -> int:
        """Waiting helpers admitted before `seq`: its place in the queue (R4, R6)."""
        statement = select(func.count()).where(
            row_table.c.owner == owner, row_table.c.state == RowState.WAITING.value, row_table.c.seq < seq
        )
        async with self.engine.connect() as connection:
            return int((await connection.execute(statement)).scalar_one())

    async def usage(self, owner: str) -> list[UsageLine]:
        table = usage_table
        async with self.engine.connect() as connection:
            result = await connection.execute(select(table).where(table.c.owner == owner).order_by(table.c.seq))
            return [UsageLine.model_validate(plain(record)) for record in result.mappings()]

    async def events(self, owner: str) -> list[ChatEvent]:
        table = events_table
        async with self.engine.connect() as connection:
            result = await connection.execute(select(table).where(table.c.owner == owner).order_by(table.c.updated_at))
            return [ChatEvent.model_validate(plain(record)) for record in result.mappings()]

    async def parked(self, owner: str) -> list[ParkedSession]:
        table = parked_table
        async with self.engine.connect() as connection:
            result = await connection.execute(select(table).where(table.c.owner == owner))
            return [ParkedSession.model_validate(plain(record)) for record in result.mappings()]

    async def result_dirs(self) -> set[str]:
        async with self.engine.connect() as connection:
            result = await connection.execute(select(row_table.c.result_dir))
            return {str(d) for d in result.scalars()}
