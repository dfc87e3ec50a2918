"""How the store's rows map to columns, and the statements it sends, on SQLite and PostgreSQL alike.

`store.helper_store.HelperStore` runs them; this module only builds them (no connection, no I/O).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Executable,
    Insert,
    Table,
    Update,
    bindparam,
    func,
    insert,
    update,
)
from sqlalchemy.dialects import postgresql as postgresql_insert
from sqlalchemy.dialects import sqlite as sqlite_insert

from contracts.core_api import Action, QuestionChoices
from domain.audit import WaitEnd, shown_digest
from domain.messages.activities import FollowedUp
from domain.outcome import OutcomeKind
from domain.rows import HelperRow, RowState
from store.reads import aware
from store.records import KeptSession
from store.schema import (
    ChatEventRecordRow,
    FollowReplicaRecord,
    HelperRowRecord,
    KeptSessionRecord,
    ParkedSessionRecord,
    UsageRecord,
    WaitRecordRow,
)

row_table = cast(Table, HelperRowRecord.__table__)
usage_table = cast(Table, UsageRecord.__table__)
events_table = cast(Table, ChatEventRecordRow.__table__)
parked_table = cast(Table, ParkedSessionRecord.__table__)
kept_table = cast(Table, KeptSessionRecord.__table__)
replicas_table = cast(Table, FollowReplicaRecord.__table__)
wait_table = cast(Table, WaitRecordRow.__table__)


class RowChanges(TypedDict, total=False):
    """The columns a state write may set, with their types (mypy checks every caller)."""

    state: RowState
    session_id: str
    steps: int
    work_tokens: int
    input_tokens: int
    last_message: str
    outcome_kind: OutcomeKind
    summary: str
    choices: QuestionChoices | None
    actions: list[Action]
    started_at: datetime
    deadline_at: datetime
    finished_at: datetime
    delivered_at: datetime | None
    keep_until: datetime | None
    wait_ends_at: datetime | None
    wait_reminders_ms: list[int] | None


WRITABLE = frozenset(RowChanges.__annotations__)


# Each statement is built once per shape (its table and the columns it writes) with bound parameters and cached;
# a call sends only its values, so SQLAlchemy neither coerces each value nor computes the statement's cache key
# again. The goal it serves: worker CPU per quick helper ≤ ×3 of the bare workflow (tools.bench.helper_rate).
Prepared = tuple[Executable, dict[str, Any]]
VALUE = "v_"  # a bound value's name: a column's own name is reserved for SQLAlchemy's SET and VALUES clauses


def _bound(table: Table, names: Iterable[str]) -> dict[str, BindParameter[Any]]:
    return {name: bindparam(VALUE + name, type_=table.c[name].type) for name in names}


def _values(values: Mapping[str, Any]) -> dict[str, Any]:
    return {VALUE + name: value for name, value in values.items()}


# One admission's row, named by bound parameters (`_admission_params` fills them): the WHERE of the cached writes.
_BOUND_ADMISSION = (
    row_table.c.owner == bindparam("key_owner"),
    row_table.c.helper_id == bindparam("key_helper_id"),
    row_table.c.seq == bindparam("key_seq"),
)
_BOUND_GENERATION: BindParameter[int] = bindparam("key_generation")


def _admission_params(owner: str, helper_id: str, seq: int, generation: int) -> dict[str, Any]:
    return {"key_owner": owner, "key_helper_id": helper_id, "key_seq": seq, "key_generation": generation}


@functools.lru_cache(maxsize=128)
def _state_update(names: tuple[str, ...], returning: bool) -> Update:
    statement = (
        update(row_table)
        .where(*_BOUND_ADMISSION, row_table.c.generation <= _BOUND_GENERATION)
        .values(_bound(row_table, (*names, "generation", "updated_at")))
    )
    return statement.returning(*row_table.c) if returning else statement


def state_update(
    owner: str, helper_id: str, seq: int, generation: int, changes: Mapping[str, Any], *, returning: bool = False
) -> Prepared:
    """A guarded state write of one admission's row: applied while the stored generation is not newer."""
    unknown = set(changes) - WRITABLE
    if unknown:  # only an untyped caller gets here
        raise ValueError(f"not writable: {sorted(unknown)}")
    values = {name: column_value(value) for name, value in changes.items()}
    params = _values({**values, "generation": generation, "updated_at": now()})
    params.update(_admission_params(owner, helper_id, seq, generation))
    return _state_update(tuple(sorted(changes)), returning), params


# Counts a session only adds to: a write that would take one back is an older read than the row's.
_MONOTONE_PROGRESS = ("steps", "work_tokens")


@functools.lru_cache(maxsize=8)
def _progress_update(names: tuple[str, ...]) -> Update:
    bound = _bound(row_table, names)
    return (
        update(row_table)
        .where(
            *_BOUND_ADMISSION,
            row_table.c.generation == _BOUND_GENERATION,
            row_table.c.state == RowState.RUNNING.value,
            *(row_table.c[name] <= bound[name] for name in _MONOTONE_PROGRESS if name in bound),
        )
        .values(bound)
    )


def progress_update(owner: str, helper_id: str, seq: int, generation: int, values: Mapping[str, Any]) -> Prepared:
    """A running row's progress, written only while this generation runs it, and never taking its steps or its
    work back: two follows of one helper (an attempt taken for lost while it still runs, and the next) may write
    their reads out of order."""
    params = _values(values)
    params.update(_admission_params(owner, helper_id, seq, generation))
    return _progress_update(tuple(sorted(values))), params


_FOLLOW_REPLICA_BOUND = _bound(row_table, ("follow_replica", "follow_started_at"))
_FOLLOW_REPLICA = (
    update(row_table)
    .where(
        *_BOUND_ADMISSION,
        row_table.c.generation == _BOUND_GENERATION,
        row_table.c.state == RowState.RUNNING.value,
    )
    .values(
        follow_replica=_FOLLOW_REPLICA_BOUND["follow_replica"],
        follow_started_at=func.coalesce(row_table.c.follow_started_at, _FOLLOW_REPLICA_BOUND["follow_started_at"]),
    )
)


def follow_replica_update(
    owner: str, helper_id: str, seq: int, generation: int, replica: str | None, started_at: datetime | None
) -> Prepared:
    """The replica whose follow attempt starts on a running row's session; with `started_at`, when a worker began
    following it, of which the first moment is kept."""
    params = _values({"follow_replica": replica, "follow_started_at": started_at})
    params.update(_admission_params(owner, helper_id, seq, generation))
    return _FOLLOW_REPLICA, params


@functools.lru_cache(maxsize=32)
def _insert(table: Table, names: tuple[str, ...]) -> Insert:
    return insert(table).values(_bound(table, names))


def row_insert(table: Table, values: Mapping[str, Any]) -> Prepared:
    return _insert(table, tuple(sorted(values))), _values(values)


def link_follow_up(row: HelperRow, earlier: FollowedUp) -> Update:
    return (
        update(row_table)
        .where(*admission_of(row.owner, earlier.helper_id, earlier.seq), row_table.c.generation <= earlier.generation)
        .values(
            followed_up_by=row.helper_id,
            state=earlier.state.value,
            delivered_at=column_value(earlier.delivered_at),
            keep_until=column_value(earlier.keep_until),
            generation=earlier.generation,
            updated_at=now(),
        )
    )


def admission_of(owner: str, helper_id: str, seq: int) -> tuple[ColumnElement[bool], ...]:
    """The WHERE clause naming one admission of one row."""
    return (row_table.c.owner == owner, row_table.c.helper_id == helper_id, row_table.c.seq == seq)


def now() -> datetime:
    return datetime.now(UTC)


def utc(moment: datetime) -> datetime:
    # SQLite keeps the clock time and drops the offset: store every moment as UTC.
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def column_value(value: Any) -> Any:
    if isinstance(value, RowState | OutcomeKind):
        return value.value
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, QuestionChoices):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [item.model_dump(mode="json") if isinstance(item, Action) else item for item in value]
    return value


def to_columns(row: HelperRow) -> dict[str, Any]:
    values = {name: column_value(value) for name, value in row.model_dump(mode="python").items()}
    values["state"] = row.state.value
    values["outcome_kind"] = row.outcome_kind.value if row.outcome_kind else None
    values["limits"] = row.limits.model_dump()
    values["actions"] = [a.model_dump(mode="json") for a in row.actions]
    values["boundary"] = list(row.boundary)
    return values


def plain(record: Any) -> dict[str, Any]:
    return {name: aware(value) if isinstance(value, datetime) else value for name, value in dict(record).items()}


def to_kept(record: Any) -> KeptSession:
    return KeptSession.model_validate({**plain(record), "kept_at": aware(record["kept_at"])})


def dialect_insert(dialect: str, table: Table) -> sqlite_insert.Insert | postgresql_insert.Insert:
    if dialect == "postgresql":
        return postgresql_insert.insert(table)
    return sqlite_insert.insert(table)


@functools.lru_cache(maxsize=32)
def _insert_or_skip(dialect: str, table: Table, names: tuple[str, ...]) -> Insert:
    return dialect_insert(dialect, table).values(_bound(table, names)).on_conflict_do_nothing()


def insert_or_skip(dialect: str, table: Table, values: Mapping[str, Any]) -> Prepared:
    """INSERT … ON CONFLICT DO NOTHING (SQLite and PostgreSQL)."""
    return _insert_or_skip(dialect, table, tuple(sorted(values))), _values(values)


@functools.lru_cache(maxsize=32)
def _upsert(dialect: str, table: Table, names: tuple[str, ...], key: str) -> Insert:
    statement = dialect_insert(dialect, table).values(_bound(table, names))
    return statement.on_conflict_do_update(
        index_elements=[key], set_={name: statement.excluded[name] for name in names if name != key}
    )


def upsert(dialect: str, table: Table, values: Mapping[str, Any], key: str) -> Prepared:
    """INSERT … ON CONFLICT (key) DO UPDATE with the same values: one statement instead of an update that may
    find nothing and an insert after it."""
    return _upsert(dialect, table, tuple(sorted(values)), key), _values(values)


# What a wait's record takes from its row: what the owner was shown, and when.
SHOWN_COLUMNS = (
    row_table.c.session_id,
    row_table.c.summary,
    row_table.c.choices,
    row_table.c.finished_at,
    row_table.c.delivered_at,
)


def wait_record(owner: str, end: WaitEnd, shown: Mapping[str, Any]) -> dict[str, Any]:
    """A wait's record: its end, and what its row showed (`SHOWN_COLUMNS`), digested as it was shown."""
    choices = QuestionChoices.model_validate(shown["choices"]) if shown["choices"] is not None else None
    text = shown["summary"] or ""
    return {
        "owner": owner,
        "helper_id": end.helper_id,
        "seq": end.seq,
        "session_id": shown["session_id"],
        "kind": end.kind.value,
        "question_id": end.question_id,
        "ended": end.ended.value,
        "ended_at": utc(end.ended_at),
        "reminders_sent": end.reminders_sent,
        "answer": end.answer.model_dump(mode="json", exclude_none=True) if end.answer is not None else None,
        "asked_grant": end.asked_grant,
        "granted": end.granted,
        "decided_by": end.decider.by,
        "decided_via": end.decider.via,
        "decided_through": end.decider.through,
        "follow_up": end.follow_up,
        "language": end.language,
        "shown_text": text,
        "shown_choices": shown["choices"],
        "shown_sha256": shown_digest(text, choices),
        "asked_at": column_value(shown["finished_at"]),
        "delivered_at": column_value(shown["delivered_at"]),
    }
