"""The store's roles as docs/operations.md sets them up (deploy/postgres/roles.sql), on the real PostgreSQL:
the migration runs as the schema owner, the workers' role reads and writes rows but cannot change the schema,
the starter's role only reads (R40's "one credential per use" in the trust model)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from config.store_address import StoreAddress
from domain.rows import RowState
from store.database import create_engine, migrate
from store.helper_store import HelperStore
from tests.conftest import POSTGRES_URL
from tests.helpers import fresh_postgres_database
from tests.store.test_helper_store import row

pytestmark = pytest.mark.postgres

ROLES_SQL = Path(__file__).resolve().parents[2] / "deploy" / "postgres" / "roles.sql"


@pytest.fixture
async def database() -> AsyncIterator[str]:
    """A fresh database owned by `helpers`, with roles.sql applied twice (it must be idempotent)."""
    async with fresh_postgres_database(POSTGRES_URL) as url:
        as_superuser = create_async_engine(url, isolation_level="AUTOCOMMIT")
        try:
            async with as_superuser.connect() as connection:
                if not await connection.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = 'helpers'")):
                    await connection.execute(text("CREATE ROLE helpers LOGIN"))
                await connection.execute(text(f'ALTER DATABASE "{make_url(url).database}" OWNER TO helpers'))
            for _ in range(2):
                async with as_superuser.connect() as connection:
                    raw = await connection.get_raw_connection()
                    await raw.driver_connection.execute(ROLES_SQL.read_text())  # type: ignore[union-attr]
            yield url
        finally:
            await as_superuser.dispose()


def _as(url: str, role: str) -> str:
    return make_url(url).set(username=role, password=None).render_as_string(hide_password=False)


async def test_each_role_can_do_its_job_and_no_more(database: str) -> None:
    owner = create_engine(StoreAddress.parse(_as(database, "helpers")))
    try:
        await migrate(owner)
    finally:
        await owner.dispose()

    app = await HelperStore.connect(_as(database, "helpers_app"))
    try:
        assert await app.insert_admitted(row("h1", state=RowState.RUNNING))
        assert (await app.get("anna", "h1")) is not None
        assert await app.remove_rows("anna", ["h1"]) is not None
        assert await app.insert_admitted(row("h2"))
        with pytest.raises(DBAPIError, match="permission denied"):
            async with app.engine.begin() as connection:
                await connection.execute(text("CREATE TABLE intruder (id int)"))
    finally:
        await app.close()

    reader = await HelperStore.connect(_as(database, "helpers_reader"))
    try:
        assert [r.helper_id for r in await reader.reads.views("anna")] == ["h2"]
        with pytest.raises(DBAPIError, match="permission denied"):
            await reader.insert_admitted(row("h3"))
        with pytest.raises(DBAPIError, match="permission denied"):
            await reader.remove_rows("anna", ["h2"])
    finally:
        await reader.close()
