"""Durable sessions of the reference core in one SQLite file (stdlib sqlite3).

One row per session: its idempotency key, the create request and the latest snapshot; for a session
that can be continued, its conversation; for a follow-up session, the session it continues. A reset
clears the request, snapshot and conversation but keeps the key (so a late retry of the same create can
never start a second session, R9) and the link to the continued session (so a session is continued at
most once, and a reset one is told apart from an unknown one). Every write is a single autocommitted
statement in WAL mode: cheap enough to run on the event loop, and the loop's single thread makes
create-or-find race-free.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from contracts.core_api import CreateSession, SessionStatus, Snapshot

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id      TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    owner           TEXT NOT NULL,
    helper_id       TEXT NOT NULL,
    request         TEXT,            -- CreateSession JSON; NULL after a reset
    snapshot        TEXT,            -- Snapshot JSON; NULL after a reset
    status          TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    reset_at        TEXT,
    conversation    TEXT,            -- the carried conversation (reference.core.carried); NULL after a reset
    continue_from   TEXT             -- the session this one continues; kept after a reset
);
CREATE INDEX IF NOT EXISTS sessions_by_status ON sessions (status);
CREATE TABLE IF NOT EXISTS used_grants (
    grant_id   TEXT PRIMARY KEY,     -- a grant is performed once, whichever session carries it (R55)
    session_id TEXT NOT NULL,
    used_at    TEXT NOT NULL
);
"""
# Columns that a database of an older reference core lacks: added when it is opened.
_ADDED_COLUMNS = {"conversation": "TEXT", "continue_from": "TEXT"}
_INDEXES = "CREATE INDEX IF NOT EXISTS sessions_by_continue_from ON sessions (continue_from);"


@dataclass(frozen=True)
class KeyRecord:
    """What an idempotency key names, even after the session was reset."""

    session_id: str
    owner: str
    helper_id: str
    removed: bool


@dataclass(frozen=True)
class SourceRecord:
    """What a follow-up create needs to know of the session it names, also after that session was reset."""

    session_id: str
    owner: str
    removed: bool
    snapshot: Snapshot | None  # None after a reset
    conversation: str | None  # None after a reset, or when the session never stopped where it could be continued
    continued_by: str | None  # the follow-up session that continues it, if any


@dataclass(frozen=True)
class StoredSession:
    request: CreateSession
    snapshot: Snapshot


def _now() -> str:
    return datetime.now(UTC).isoformat()


class SessionStore:
    def __init__(self, path: Path, on_change: Callable[[str], None] = lambda session_id: None) -> None:
        self._on_change = on_change
        path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=NORMAL")
        self._connection.executescript(_SCHEMA)
        present = {row[1] for row in self._connection.execute("PRAGMA table_info(sessions)")}
        for column, kind in _ADDED_COLUMNS.items():
            if column not in present:
                self._connection.execute(f"ALTER TABLE sessions ADD COLUMN {column} {kind}")
        self._connection.executescript(_INDEXES)

    def close(self) -> None:
        self._connection.close()

    def find_key(self, idempotency_key: str) -> KeyRecord | None:
        row = self._connection.execute(
            "SELECT session_id, owner, helper_id, reset_at IS NOT NULL FROM sessions WHERE idempotency_key = ?",
            (idempotency_key,),
        ).fetchone()
        if row is None:
            return None
        return KeyRecord(session_id=row[0], owner=row[1], helper_id=row[2], removed=bool(row[3]))

    def insert(self, request: CreateSession, snapshot: Snapshot) -> None:
        now = _now()
        snapshot.version = 1
        self._connection.execute(
            "INSERT INTO sessions (session_id, idempotency_key, owner, helper_id, request, snapshot, status,"
            " created_at, updated_at, continue_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                snapshot.session_id,
                request.idempotency_key,
                request.owner,
                request.helper_id,
                request.model_dump_json(),
                snapshot.model_dump_json(),
                snapshot.status.value,
                now,
                now,
                # One statement: a follow-up exists exactly when its source is marked continued.
                request.continue_from,
            ),
        )

    def source(self, session_id: str) -> SourceRecord | None:
        """The session a follow-up names, with its conversation and its follow-up; None if never created."""
        row = self._connection.execute(
            "SELECT owner, reset_at IS NOT NULL, snapshot, conversation FROM sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            return None
        follow_up = self._connection.execute(
            "SELECT session_id FROM sessions WHERE continue_from = ? ORDER BY created_at LIMIT 1", (session_id,)
        ).fetchone()
        return SourceRecord(
            session_id=session_id,
            owner=row[0],
            removed=bool(row[1]),
            snapshot=None if row[2] is None else Snapshot.model_validate_json(row[2]),
            conversation=row[3],
            continued_by=None if follow_up is None else follow_up[0],
        )

    def load(self, session_id: str) -> StoredSession | None:
        row = self._connection.execute(
            "SELECT request, snapshot FROM sessions WHERE session_id = ? AND reset_at IS NULL", (session_id,)
        ).fetchone()
        if row is None:
            return None
        return StoredSession(
            request=CreateSession.model_validate_json(row[0]),
            snapshot=Snapshot.model_validate_json(row[1]),
        )

    def save(self, snapshot: Snapshot, conversation: str | None = None) -> None:
        """Store the snapshot as its next version (stored with it, so versions survive a restart) and wake
        the long-poll reads waiting for it (R44). `conversation`, when given, is stored in the same write, so
        a session that can be continued always has the conversation to continue."""
        snapshot.version = (snapshot.version or 0) + 1
        self._connection.execute(
            "UPDATE sessions SET snapshot = ?, status = ?, updated_at = ?, conversation = COALESCE(?, conversation)"
            " WHERE session_id = ? AND reset_at IS NULL",
            (snapshot.model_dump_json(), snapshot.status.value, _now(), conversation, snapshot.session_id),
        )
        self._on_change(snapshot.session_id)

    def remove(self, session_id: str) -> None:
        """Forget the session's content; the key stays as a tombstone (no second session, ever)."""
        now = _now()
        self._connection.execute(
            "UPDATE sessions SET request = NULL, snapshot = NULL, status = NULL, conversation = NULL,"
            " updated_at = ?, reset_at = ? WHERE session_id = ?",
            (now, now, session_id),
        )
        self._on_change(session_id)

    def use_grant(self, grant_id: str, session_id: str) -> bool:
        """Mark the grant used, durably, before its action is performed; False if it was used already (R55)."""
        cursor = self._connection.execute(
            "INSERT OR IGNORE INTO used_grants (grant_id, session_id, used_at) VALUES (?, ?, ?)",
            (grant_id, session_id, _now()),
        )
        return cursor.rowcount == 1

    def session_ids_with_status(self, status: SessionStatus) -> list[str]:
        rows = self._connection.execute(
            "SELECT session_id FROM sessions WHERE status = ? AND reset_at IS NULL ORDER BY created_at",
            (status.value,),
        ).fetchall()
        return [row[0] for row in rows]
