"""Where the store is: HELPER_STORE_URL parsed once into one value, light to import (no SQLAlchemy), so the starter's
read commands stay fast (R43).

The grammar is the one SQLAlchemy documents, `dialect[+driver]://[user[:password]@][host][:port][/database][?query]`
with user, password and database percent-decoded; the engine is built from these parts (`sqlalchemy_url`), never
from the text again, so the bare readers (`store.reads`) and SQLAlchemy always connect to the same place.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, quote, unquote

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

Dialect = Literal["sqlite", "postgresql"]

_URL = re.compile(
    r"""
        (?P<name>[\w+]+)://
        (?:(?P<user>[^:/]*)(?::(?P<password>[^@]*))?@)?
        (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
        (?:/(?P<database>[^?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)
# Connect options of the bare readers: neither driver reads a URL's query, so a URL with one is SQLAlchemy's.
_BARE_DRIVERS: dict[str, Dialect] = {"sqlite+aiosqlite": "sqlite", "postgresql+asyncpg": "postgresql"}
# A password this short could be any word of a message: only a longer one is blotted out of texts.
_PASSWORD_MIN_SCRUB = 3


@dataclass(frozen=True)
class StoreAddress:
    """The parts of a store URL. Its repr and `described` never show the password."""

    drivername: str  # "sqlite+aiosqlite", "postgresql+asyncpg", ...
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    query: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # it can carry a password too
    text: str = field(default="", repr=False, compare=False)  # the URL as given, to find it in messages

    @classmethod
    def parse(cls, text: str) -> StoreAddress:
        """The URL's parts; ValueError naming what is wrong (never quoting the URL, which may hold a password)."""
        found = _URL.fullmatch(text)
        if found is None:
            raise ValueError("a store URL starts with dialect[+driver]://, e.g. sqlite+aiosqlite:///data/helpers.db")
        parts = found.groupdict()
        port = parts["port"] or None
        if port is not None and not port.isdigit():
            raise ValueError("the store URL's port is not a number (a password with '@', '/' or ':' must be %-quoted)")
        return cls(
            drivername=parts["name"],
            host=parts["ipv4host"] or parts["ipv6host"],
            port=int(port) if port is not None else None,
            user=_unquoted(parts["user"]),
            password=_unquoted(parts["password"]),
            database=_unquoted(parts["database"]),
            query=tuple(parse_qsl(parts["query"])) if parts["query"] is not None else (),
            text=text,
        )

    @property
    def dialect(self) -> str:
        return self.drivername.partition("+")[0]

    @property
    def driver(self) -> str:
        return self.drivername.partition("+")[2]

    @property
    def in_memory(self) -> bool:
        return self.dialect == "sqlite" and self.database in (None, "", ":memory:")

    @property
    def described(self) -> str:
        """The URL as it may be printed: no user, no password, no query."""
        shown = self.drivername + "://"
        if self.host is not None:
            shown += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            shown += f":{self.port}"
        if self.database is not None:
            shown += "/" + quote(self.database, safe=" +/")
        return shown

    def __str__(self) -> str:
        return self.described

    def absolute(self) -> StoreAddress:
        """The same store with a SQLite file's path made absolute (from the current folder): where it really is."""
        if self.dialect != "sqlite" or self.in_memory:
            return self
        return replace(self, database=self.sqlite_path(), text="")

    def scrubbed(self, message: str) -> str:
        """`message` with this URL in its printable form and the password blotted out."""
        if self.text:
            message = message.replace(self.text, self.described)
        if self.password and len(self.password) >= _PASSWORD_MIN_SCRUB:
            message = message.replace(self.password, "***")
        return message

    # --- what each driver connects with ---------------------------------------------------------------

    def sqlalchemy_url(self, *, existing: bool = False) -> URL:
        """The engine's URL, made from these parts. With `existing`, a SQLite file is opened only if it is there
        (`sqlite_uri`): the driver never creates it."""
        from sqlalchemy.engine import URL

        query: dict[str, str | list[str]] = {}
        for name, value in self.query:
            held = query.get(name)
            query[name] = value if held is None else [*([held] if isinstance(held, str) else held), value]
        database = self.database
        if existing and self.dialect == "sqlite" and not self.in_memory and "uri" not in query:
            database, _, options = self.sqlite_uri().partition("?")
            query |= {"uri": "true", **dict(parse_qsl(options))}
        return URL.create(
            self.drivername,
            username=self.user,
            password=self.password,
            host=self.host,
            port=self.port,
            database=database,
            query=query,
        )

    @property
    def bare(self) -> Dialect | None:
        """Which bare reader (`store.reads`) reads this store without SQLAlchemy: SQLite files through aiosqlite's
        URL, PostgreSQL through asyncpg's, with no query. None: the store is read through `HelperStore`."""
        dialect = _BARE_DRIVERS.get(self.drivername)
        if dialect is None or self.query:
            return None
        if dialect == "sqlite" and (self.in_memory or self.user is not None or self.host or self.port):
            return None
        return dialect

    def sqlite_path(self) -> str:
        """The SQLite file, absolute, as SQLAlchemy's SQLite dialect opens it."""
        return os.path.abspath(self.database or "")

    def sqlite_uri(self) -> str:
        """The SQLite file as a URI that opens it for reading and writing only if it exists (SQLite's `mode=rw`),
        for a driver called with `uri=True`: a read never leaves an empty store behind."""
        return f"file:{quote(self.sqlite_path())}?mode=rw"

    def asyncpg_arguments(self) -> dict[str, Any]:
        """`asyncpg.connect`'s arguments, as SQLAlchemy's asyncpg dialect passes them."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database or None,
        }


def _unquoted(part: str | None) -> str | None:
    return None if part is None else unquote(part)
