"""Engines and migrations for the store: SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# The address and the revisions with the schema check's rule live in stdlib-only modules the bare reads share (R43).
from config.store_address import StoreAddress
from store.revisions import (
    REVISION_QUERY,
    REVISIONS,
    NoStore,
    SchemaNotCurrent,
    check_revision,
    check_sqlite_file,
    head_revision,
)

__all__ = ["REVISIONS", "NoStore", "SchemaNotCurrent", "check_schema", "create_engine", "head_revision", "migrate"]

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


# SQLite waits this long for another writer's lock before it gives up (the driver's timeout and busy_timeout).
SQLITE_TIMEOUT_S = 30
# PostgreSQL connections a process (a worker, the migration) holds. A write holds one for a few milliseconds: 20
# take a replica's writes at capacity (a row write per core step of 2,000 running helpers, the admissions and
# outcomes beside them) without a queue; three replicas and the starter API stay far below PostgreSQL's 100.
STORE_POOL_SIZE = 20
STORE_POOL_WAIT_S = 10
# PostgreSQL's SQLSTATE for a database that does not exist (invalid_catalog_name).
MISSING_DATABASE = "3D000"


def create_engine(address: StoreAddress, *, creates: bool = False) -> AsyncEngine:
    """An async engine; SQLite gets WAL and a busy timeout so readers never block the workers' writes. Only an
    engine that `creates` (a migration's) makes a SQLite file and its folder; any other raises `NoStore` when the
    file is not there, and its driver never creates one. PostgreSQL never creates a database on connecting."""
    if address.dialect == "sqlite":
        if not address.in_memory:
            path = Path(address.sqlite_path())
            if creates:
                path.parent.mkdir(parents=True, exist_ok=True)
            else:
                check_sqlite_file(str(path))
        url = address.sqlalchemy_url(existing=not creates)
        engine = create_async_engine(url, connect_args={"timeout": SQLITE_TIMEOUT_S})
        set_sqlite_pragmas(engine.sync_engine)
        return engine
    # No pre-ping: a connection PostgreSQL dropped (a restart) fails its statement once, SQLAlchemy then replaces
    # the whole pool, and the activity's retry runs on a new connection; a ping would cost a round trip per checkout.
    # A fixed pool: the connections stay open under steady load instead of overflow connections being opened and
    # closed for each burst of writes, and a write waits for a connection at most STORE_POOL_WAIT_S.
    return create_async_engine(
        address.sqlalchemy_url(), pool_size=STORE_POOL_SIZE, max_overflow=0, pool_timeout=STORE_POOL_WAIT_S
    )


def set_sqlite_pragmas(engine: Engine) -> None:
    """WAL (readers never wait for a writer), the busy timeout, and synchronous=NORMAL (no fsync per commit; in
    WAL mode the database stays consistent, and only a power cut can take back the last commits)."""

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


def _upgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision`; safe to run from every process at start (a no-op when current)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, revision)


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _current_revision(connection: Connection) -> str | None:
    try:
        return connection.exec_driver_sql(REVISION_QUERY).scalar()
    except DBAPIError:  # no version table: nothing was ever migrated
        connection.rollback()
        return None


async def check_schema(engine: AsyncEngine) -> None:
    """Fail clearly, naming both revisions, when the schema is behind this code; accept a newer release's
    (`store.revisions.check_revision`). `NoStore` when the PostgreSQL database is not there."""
    try:
        async with engine.connect() as connection:
            current = await connection.run_sync(_current_revision)
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) == MISSING_DATABASE:
            raise NoStore.database(engine.url.database) from None
        raise
    check_revision(current)
