"""Engines and migrations for the store: SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def create_engine(url: str) -> AsyncEngine:
    """An async engine; SQLite gets WAL and a busy timeout so readers never block the workers' writes."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_async_engine(url, pool_pre_ping=True)


def _upgrade(connection: Connection, revision: str) -> None:
    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision`; safe to run from every process at start (a no-op when current)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, revision)


class SchemaNotCurrent(RuntimeError):
    """The store's schema is not the one this code needs: run `python -m store migrate`."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def check_schema(engine: AsyncEngine) -> None:
    """Fail clearly, naming both revisions, when the schema is behind or ahead of this code."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    async with engine.connect() as connection:
        current = await connection.run_sync(_current_revision)
    if current != head:
        raise SchemaNotCurrent(
            f"the store's schema is at {current or 'nothing'}, this code needs {head}: run `python -m store migrate`"
        )
