"""The store's address (`config.store_address.StoreAddress`): HELPER_STORE_URL parsed once, without SQLAlchemy. The
engine and the bare readers connect where SQLAlchemy's own parse of the URL would, the printable forms never show the
password, and a URL that is not one says what is wrong without quoting it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from config.store_address import StoreAddress

ROOT = Path(__file__).resolve().parents[2]
URLS = [
    "sqlite+aiosqlite:///data/helpers.sqlite3",
    "sqlite+aiosqlite:////tmp/x%20y/helpers.sqlite3",
    "sqlite+aiosqlite:///helpers.sqlite3?timeout=5",
    "sqlite+aiosqlite://",
    "sqlite+aiosqlite:///:memory:",
    "postgresql+asyncpg://postgres@127.0.0.1:5432/helpers",
    "postgresql+asyncpg://iva:p%40ss%3Aword@db.example.com/helpers",
    "postgresql+asyncpg://iva:secret@[::1]:6432/helpers",
    "postgresql+asyncpg://localhost",
    "postgresql+asyncpg://postgres@127.0.0.1/helpers?ssl=require&server_settings=a&server_settings=b",
    "postgresql+psycopg://postgres@127.0.0.1/helpers",
]


@pytest.mark.parametrize("url", URLS)
def test_a_url_parses_as_sqlalchemy_parses_it(url: str) -> None:
    """The parts are SQLAlchemy's, and the engine's URL made from them is the one SQLAlchemy makes of the text."""
    address = StoreAddress.parse(url)
    parsed = make_url(url)
    assert (address.drivername, address.host, address.port, address.database) == (
        parsed.drivername,
        parsed.host,
        parsed.port,
        parsed.database,
    )
    assert (address.user, address.password) == (parsed.username, parsed.password)
    assert address.sqlalchemy_url() == parsed
    assert (address.dialect, address.driver) == (parsed.get_backend_name(), parsed.get_driver_name())


@pytest.mark.parametrize(
    ("url", "bare"),
    [
        ("sqlite+aiosqlite:///data/helpers.sqlite3", "sqlite"),
        ("postgresql+asyncpg://iva:secret@[::1]:6432/helpers", "postgresql"),
        ("postgresql+asyncpg://localhost", "postgresql"),
        ("sqlite+aiosqlite:///helpers.sqlite3?timeout=5", None),  # a query: connect options stay SQLAlchemy's
        ("sqlite+aiosqlite://", None),  # in memory
        ("sqlite+aiosqlite:///:memory:", None),
        ("sqlite:///helpers.sqlite3", None),  # another driver
        ("postgresql+psycopg://postgres@127.0.0.1/helpers", None),
        ("postgresql+asyncpg://postgres@127.0.0.1/helpers?ssl=require", None),
    ],
)
def test_the_bare_readers_take_only_the_two_documented_forms(url: str, bare: str | None) -> None:
    """R43: a bare reader takes an aiosqlite file or an asyncpg server without a query; any other URL is read by
    `HelperStore`."""
    assert StoreAddress.parse(url).bare == bare


def test_the_bare_readers_connect_where_sqlalchemy_would() -> None:
    """R43: the SQLite file is the one SQLAlchemy opens (relative to the working folder); asyncpg gets the parts."""
    sqlite = StoreAddress.parse("sqlite+aiosqlite:///data/helpers.sqlite3")
    assert sqlite.sqlite_path() == str(Path("data/helpers.sqlite3").absolute())
    postgres = StoreAddress.parse("postgresql+asyncpg://iva:p%40ss%3Aword@db.example.com:6432/helpers")
    assert postgres.asyncpg_arguments() == {
        "host": "db.example.com",
        "port": 6432,
        "user": "iva",
        "password": "p@ss:word",
        "database": "helpers",
    }


def test_the_printable_forms_never_show_the_password() -> None:
    """R42: logs and errors name the store by its dialect, host, port and database; the password, the user and a
    query (which can carry a password) stay out of `described`, the repr and a scrubbed message."""
    text = "postgresql+asyncpg://iva:hunter22@db.example.com:5432/helpers?password=hunter22"
    address = StoreAddress.parse(text)
    assert address.described == str(address) == "postgresql+asyncpg://db.example.com:5432/helpers"
    assert "hunter22" not in repr(address)
    message = address.scrubbed(f"cannot connect to {text}: password hunter22 refused")
    assert message == "cannot connect to postgresql+asyncpg://db.example.com:5432/helpers: password *** refused"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("not a url", "starts with dialect"),
        ("/data/helpers.sqlite3", "starts with dialect"),
        ("postgresql+asyncpg://anna:secret-db.local/helpers", "port is not a number"),  # a password without its @
        ("postgresql+asyncpg://db:port/helpers", "port is not a number"),
    ],
)
def test_a_url_that_is_not_one_says_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as raised:
        StoreAddress.parse(url)
    assert "secret" not in str(raised.value)


def test_the_address_loads_no_sqlalchemy() -> None:
    """R43: parsing the address is part of every read command: it loads nothing heavier than the stdlib."""
    probe = (
        "import sys; from config.store_address import StoreAddress\n"
        "StoreAddress.parse('postgresql+asyncpg://iva:secret@db/helpers').asyncpg_arguments()\n"
        "print('sqlalchemy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, timeout=60, check=True)
    assert done.stdout.decode().strip() == "False"
