"""The schema revisions this code knows, and what a store's revision (or its absence) means for it: stdlib only, so
the starter's read commands check the store without loading SQLAlchemy or alembic (R43)."""

from __future__ import annotations

from pathlib import Path

# The revisions of store/migrations, oldest first, spelled here so that opening the store for a read never loads
# alembic (a test checks they match the migrations folder). Add each new revision at the end.
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009")
# Where alembic keeps a store's revision.
REVISION_QUERY = "SELECT version_num FROM alembic_version"


class SchemaNotCurrent(RuntimeError):
    """The store's schema is not the one this code needs: run `python -m store migrate`."""


class NoStore(RuntimeError):
    """There is no store where the address points: no SQLite file, no PostgreSQL database. Only a migration (the
    worker's at start, `python -m store migrate`) creates a store; opening one to read never does."""

    @classmethod
    def database(cls, name: str | None) -> NoStore:
        return cls(f"there is no database {name!r} on that server")


def check_sqlite_file(path: str) -> None:
    """`NoStore` unless the SQLite store a read opens is there: a read never creates one."""
    if not Path(path).is_file():
        raise NoStore(f"there is no SQLite file {path}")


def head_revision() -> str:
    """The schema revision this code's migrations end at."""
    return REVISIONS[-1]


def check_revision(current: str | None) -> None:
    """Fail clearly, naming both revisions, when the store's revision (None: never migrated) is behind this code.

    A revision this code does not know belongs to a newer release, whose migration ran before its workers
    rolled out: migrations only expand until every process runs the release that stops using what goes
    (docs/operations.md, "Upgrading"), so this code still works on it and goes on.
    """
    head = head_revision()
    if current == head:
        return
    if current is not None and current not in REVISIONS:
        import logging  # only on this rare path: a read never pays for it

        logging.getLogger("store.database").info(
            "the store's schema is at %s, newer than this code's %s: a newer release migrated it", current, head
        )
        return
    raise SchemaNotCurrent(
        f"the store's schema is at {current or 'nothing'}, this code needs {head}: run `python -m store migrate`"
    )
