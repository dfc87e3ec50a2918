"""A read never creates a store: the console script run from another folder, the HTTP service and `HelperStore`
find no store where the settings point and say which store they looked at (no password) and how to point at the
right one, with the starter's exit code for it (3, unavailable), leaving no file, folder or database behind.
Only a migration creates a store."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from config.settings import Settings
from store.database import NoStore
from store.helper_store import HelperStore
from tests.conftest import POSTGRES_URL
from tests.helpers import service_client, without_postgres

STARTER = Path(sys.executable).parent / "helper-starter"
UNAVAILABLE = 3  # starter.arguments.EXIT_CODES
PASSWORD = "pw-never-shown"


def _clean_env(home: Path, **variables: str) -> dict[str, str]:
    """The environment of a new user's shell: no HELPER_* or TEMPORAL_* variable but those given."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_", "OTEL_"))}
    return {**kept, "HOME": str(home), **variables}


def _tree(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STARTER), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _missing_postgres_url() -> str:
    """A database on the test server that does not exist, with a password in the URL (trust auth ignores it)."""
    url = make_url(POSTGRES_URL).set(database=f"missing_{uuid.uuid4().hex[:12]}", password=PASSWORD)
    return url.render_as_string(hide_password=False)


async def _database_exists(url: str) -> bool:
    address = make_url(url)
    admin = create_async_engine(address.set(database="postgres"), connect_args={"timeout": 5})
    try:
        async with admin.connect() as connection:
            found = await connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": address.database}
            )
            return found.first() is not None
    except (OSError, TimeoutError) as error:
        without_postgres(f"no PostgreSQL server answers at {POSTGRES_URL!r}: {error!r}")
    finally:
        await admin.dispose()


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--owner", "boris"],  # SQLite without an event loop (starter.cli.answer)
        ["usage", "--owner", "boris"],
        ["watch", "--owner", "boris", "--once"],  # with an event loop: the threaded reader
    ],
    ids=lambda argv: argv[0],
)
def test_a_read_from_another_folder_names_the_default_store_and_creates_none(tmp_path: Path, argv: list[str]) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = _tree(tmp_path)
    done = _run(argv, elsewhere, _clean_env(tmp_path))
    assert done.returncode == UNAVAILABLE, done.stderr
    looked_at = f"sqlite+aiosqlite:///{elsewhere / 'data' / 'helpers.sqlite3'}"
    assert f"no store at {looked_at}" in done.stderr
    assert "HELPER_STORE_URL is not set" in done.stderr and "HELPER_ENV_FILE" in done.stderr
    assert "migrate" not in done.stderr  # migrating a store nobody writes to would only hide the mistake
    assert "Traceback" not in done.stderr
    assert '"code": "unavailable"' in done.stdout
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("query", ["", "?timeout=5"], ids=["bare reader", "through SQLAlchemy"])
def test_a_read_of_a_sqlite_url_that_points_nowhere_creates_no_folder(tmp_path: Path, query: str) -> None:
    store = tmp_path / "nowhere" / "helpers.sqlite3"
    before = _tree(tmp_path)
    done = _run(
        ["show", "--owner", "boris", "--id", "h1"],
        tmp_path,
        _clean_env(tmp_path, HELPER_STORE_URL=f"sqlite+aiosqlite:///{store}{query}"),
    )
    assert done.returncode == UNAVAILABLE, done.stderr
    assert f"no store at sqlite+aiosqlite:///{store}: HELPER_STORE_URL points there" in done.stderr
    assert _tree(tmp_path) == before


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["", "?ssl=disable"], ids=["bare reader", "through SQLAlchemy"])
async def test_a_read_of_a_postgres_database_that_does_not_exist_creates_none(tmp_path: Path, query: str) -> None:
    url = _missing_postgres_url()
    assert not await _database_exists(url)
    done = _run(["list", "--owner", "boris"], tmp_path, _clean_env(tmp_path, HELPER_STORE_URL=url + query))
    assert done.returncode == UNAVAILABLE, done.stderr
    assert f"no store at postgresql+asyncpg://127.0.0.1:5432/{make_url(url).database}" in done.stderr
    assert "HELPER_STORE_URL points there" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
    assert not await _database_exists(url)
    assert _tree(tmp_path) == []


async def _service_read(settings: Settings) -> httpx.Response:
    async with service_client(settings) as client:
        return await client.get("/v1/owners/boris/helpers")


async def test_the_service_answers_503_naming_a_missing_sqlite_store_and_creates_none(tmp_path: Path) -> None:
    store = tmp_path / "nowhere" / "helpers.sqlite3"
    answered = await _service_read(Settings(store=f"sqlite+aiosqlite:///{store}", results_dir=tmp_path / "results"))
    assert answered.status_code == 503
    message = answered.json()["error"]["message"]
    assert message.startswith(f"no store at sqlite+aiosqlite:///{store}: HELPER_STORE_URL points there")
    assert _tree(tmp_path) == []


@pytest.mark.postgres
async def test_the_service_answers_503_naming_a_missing_postgres_database_and_creates_none(tmp_path: Path) -> None:
    url = _missing_postgres_url()
    answered = await _service_read(Settings(store=url, results_dir=tmp_path / "results"))
    assert answered.status_code == 503
    message = answered.json()["error"]["message"]
    assert f"no store at postgresql+asyncpg://127.0.0.1:5432/{make_url(url).database}" in message
    assert PASSWORD not in message
    assert not await _database_exists(url)


async def test_only_a_migration_creates_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'helpers.sqlite3'}"
    with pytest.raises(NoStore):
        await HelperStore.connect(url)
    assert _tree(tmp_path) == []
    store = await HelperStore.connect(url, run_migrations=True)
    await store.close()
    reopened = await HelperStore.connect(url)  # an existing store opens for reading and writing
    assert await reopened.reads.views("boris") == []
    await reopened.close()


def test_a_store_never_migrated_is_named_with_the_migration_to_run(tmp_path: Path) -> None:
    """A file that is there but holds no schema: the store exists, so migrating it is the advice, with its address."""
    store = tmp_path / "data" / "helpers.sqlite3"
    store.parent.mkdir()
    store.touch()
    done = _run(["list", "--owner", "boris"], tmp_path, _clean_env(tmp_path / "data"))
    assert done.returncode == UNAVAILABLE, done.stderr
    assert f"sqlite+aiosqlite:///{store}: the store's schema is at nothing" in done.stderr
    assert "python -m store migrate" in done.stderr
    assert _tree(tmp_path) == [tmp_path / "data", store] and store.stat().st_size == 0
