"""R43: the starter's read commands load only what reading the store needs; the Temporal client, the workflows,
the activities, the migration tool and SQLAlchemy stay unloaded (a SQLite read does not even load asyncio), so a
read answers in a fraction of a write's time. A write loads the Temporal client, not the worker's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEVER_FOR_A_READ = ("temporalio", "workflows", "activities", "alembic", "codec", "clients", "httpx", "sqlalchemy")
# A SQLite read runs on the stdlib driver without an event loop (starter.cli.answer).
NEVER_FOR_A_SQLITE_READ = (*NEVER_FOR_A_READ, "asyncio", "aiosqlite", "asyncpg")
# A write needs the Temporal client and the request models, never the worker's code nor the SQL toolkit.
NEVER_FOR_A_WRITE = ("workflows", "activities", "alembic", "sqlalchemy", "aiosqlite", "worker", "replica")


def _imported_by(argv: list[str], env: dict[str, str], exit_code: int = 0) -> set[str]:
    """The top-level packages a `python -m starter …` run imported (from `-X importtime`, on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "starter", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == exit_code, done.stdout + done.stderr[-2000:]
    names = set()
    for line in done.stderr.decode().splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("imports")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HELPER_", "TEMPORAL_"))},
        "HELPER_STORE_URL": f"sqlite+aiosqlite:///{tmp / 'helpers.sqlite3'}",
        "HELPER_RESULTS_DIR": str(tmp / "results"),
    }
    subprocess.run([sys.executable, "-m", "store", "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
    return env


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--owner", "anna"],
        ["unreported", "--owner", "anna"],
        ["usage", "--owner", "anna"],
        ["show", "--owner", "anna", "--id", "h1"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_read_command_loads_no_temporal_client(env: dict[str, str], argv: list[str]) -> None:
    """R43: a read on SQLite loads neither Temporal, nor SQLAlchemy, nor asyncio."""
    imported = _imported_by(argv, env, exit_code=1 if argv[0] == "show" else 0)
    assert "starter" in imported and "sqlite3" in imported  # the measurement itself works
    assert not imported & set(NEVER_FOR_A_SQLITE_READ), sorted(imported & set(NEVER_FOR_A_SQLITE_READ))


def test_a_read_of_another_store_url_still_answers_through_sqlalchemy(env: dict[str, str]) -> None:
    """R43: a store URL no bare reader takes (here a query string) is read by `HelperStore`, as before."""
    with_query = {**env, "HELPER_STORE_URL": env["HELPER_STORE_URL"] + "?timeout=30"}
    imported = _imported_by(["list", "--owner", "anna"], with_query)
    assert "sqlalchemy" in imported and not imported & {"temporalio", "workflows", "activities", "alembic"}


@pytest.mark.parametrize(
    "argv",
    [["close", "--owner", "anna", "--id", "h1"], ["goal", "list", "--owner", "anna"]],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_write_command_loads_the_temporal_client_not_the_worker(env: dict[str, str], argv: list[str]) -> None:
    """R43: a write (here with Temporal down: exit 3 once everything is imported) loads temporalio.client and the
    request models, not the workflows, the activities, SQLAlchemy or alembic; `close` not the core's HTTP client."""
    down = {**env, "TEMPORAL_ADDRESS": "127.0.0.1:9", "HELPER_STARTER_TIMEOUT_MS": "3000"}
    imported = _imported_by(argv, down, exit_code=3)
    assert "temporalio" in imported  # the measurement itself works
    assert not imported & set(NEVER_FOR_A_WRITE), sorted(imported & set(NEVER_FOR_A_WRITE))
    if argv[0] == "close":
        assert not imported & {"httpx", "clients"}


def test_only_the_model_check_loads_httpx() -> None:
    """R43: the core client and httpx are loaded when `start` or `goal add` asks the model catalog, not before: the
    starter, its client and the catalog's module load neither."""
    probe = (
        "import sys, starter.cli, starter.client, starter.catalog\n"
        "names = ('httpx', 'httpcore', 'clients', 'workflows', 'activities')\n"
        "print(sorted(name for name in names if name in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, timeout=60, check=True)
    assert done.stdout.decode().strip() == "[]", done.stdout + done.stderr


def test_the_invalid_request_code_is_the_owner_books() -> None:
    """R43: protocol.errors spells the code out instead of importing the owner book; they must agree."""
    from domain.book import RefusalCode
    from protocol.errors import INVALID_REQUEST, UNKNOWN_HELPER, InvalidRequest

    assert INVALID_REQUEST == RefusalCode.INVALID_REQUEST.value == InvalidRequest.code
    assert RefusalCode.UNKNOWN_HELPER.value == UNKNOWN_HELPER
