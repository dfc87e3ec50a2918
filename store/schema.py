"""The store's tables. Alembic migrations in `store/migrations` create them; this module is their map.

Rows are a projection of workflow state, written only by activities. Every write to a helper row
carries the admission `seq` and a writer `generation`, so a retried or late write can never
overwrite a newer state (R19; docs/architecture.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from contracts.core_api import MODEL_MAX_CHARS
from domain.ids import ID_MAX_CHARS

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class HelperRowRecord(Base):
    __tablename__ = "helper_rows"
    # Owner first, as every read names one owner (R43); migration 0002.
    __table_args__ = (
        Index("ix_helper_rows_owner_state_seq", "owner", "state", "seq"),
        Index("ix_helper_rows_owner_seq", "owner", "seq"),
    )

    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    helper_id: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    goal_id: Mapped[str | None] = mapped_column(String(ID_MAX_CHARS))
    state: Mapped[str] = mapped_column(String(16))
    task: Mapped[str] = mapped_column(Text)
    boundary: Mapped[list[Any]] = mapped_column(JSON)
    language: Mapped[str] = mapped_column(String(8))
    model: Mapped[str] = mapped_column(String(MODEL_MAX_CHARS))
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    session_id: Mapped[str | None] = mapped_column(String(200))
    # The column finish_requested (0001) is unused and stays in the database until a later migration drops it:
    # workers of the previous release may still insert rows during a rollout (it has a server default).
    steps: Mapped[int] = mapped_column(Integer, default=0)
    work_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    last_message: Mapped[str] = mapped_column(Text, default="")
    outcome_kind: Mapped[str | None] = mapped_column(String(16))
    summary: Mapped[str | None] = mapped_column(Text)
    actions: Mapped[list[Any]] = mapped_column(JSON, default=list)
    result_dir: Mapped[str] = mapped_column(String(500))
    admitted_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    deadline_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    keep_until: Mapped[datetime | None]
    generation: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime]
    # Follow-ups (migration 0003): the earlier helper this one continues, and the one that continues it.
    follow_up_of: Mapped[str | None] = mapped_column(String(ID_MAX_CHARS))
    followed_up_by: Mapped[str | None] = mapped_column(String(ID_MAX_CHARS))
    # When a worker began following the session (migration 0004); none while the follow waits for a slot.
    follow_started_at: Mapped[datetime | None]
    # A question outcome's choices (migration 0005): its id, options and free-text rule; none for any other
    # outcome and for a plain-text question. NULL, not JSON null, when there are none.
    choices: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # The worker replica whose follow attempt last started on the running session (migration 0007): when that
    # replica falls silent, another starts the follow again at once. The column followed_by (0006) held it before
    # and is unused: 1.3.0 workers still write it during a rollout, and it stays until a later migration drops it.
    follow_replica: Mapped[str | None] = mapped_column(String(200))
    # A delivered question's or authorization's wait (migration 0008, R54, R56): its bound, and its reminders as
    # milliseconds after delivery, for the owner's inbox.
    wait_ends_at: Mapped[datetime | None]
    wait_reminders_ms: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    # A grant's follow-up (migration 0009, R55): the action granted, performed at most once, and the one asked.
    granted_action: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))


class FollowReplicaRecord(Base):
    """A worker replica that follows helpers, and when it last said it is alive (migration 0006, R46)."""

    __tablename__ = "follow_replicas"

    identity: Mapped[str] = mapped_column(String(200), primary_key=True)
    beat_at: Mapped[datetime]


class UsageRecord(Base):
    """Usage per helper with its model (R31); kept after the row expires."""

    __tablename__ = "helper_usage"

    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    helper_id: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    goal_id: Mapped[str | None] = mapped_column(String(ID_MAX_CHARS))
    model: Mapped[str] = mapped_column(String(MODEL_MAX_CHARS))
    outcome_kind: Mapped[str] = mapped_column(String(16))
    steps: Mapped[int] = mapped_column(Integer)
    work_tokens: Mapped[int] = mapped_column(BigInteger)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime]


class ChatEventRecordRow(Base):
    """Each system event offered to the chat, with its delivery state (R26)."""

    __tablename__ = "chat_events"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS), index=True)
    helper_ids: Mapped[list[Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    receipt_id: Mapped[str | None] = mapped_column(String(200))
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime]


class ParkedSessionRecord(Base):
    """A core session whose cleanup reset failed (R20): the outcome and slot are unaffected."""

    __tablename__ = "parked_sessions"

    session_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS), index=True)
    helper_id: Mapped[str] = mapped_column(String(ID_MAX_CHARS))
    error: Mapped[str] = mapped_column(Text)
    parked_at: Mapped[datetime]


class KeptSessionRecord(Base):
    """A session kept for a follow-up instead of being reset when its helper finalized (R20); reset
    once its follow-up has its own session, its row is closed or gone, or it is older than the longest wait."""

    __tablename__ = "kept_sessions"

    session_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS))
    helper_id: Mapped[str] = mapped_column(String(ID_MAX_CHARS))
    seq: Mapped[int] = mapped_column(BigInteger)
    kept_at: Mapped[datetime]


class WaitRecordRow(Base):
    """A wait for the owner that ended (migration 0008, R56): kept HELPER_AUDIT_KEEP_MS after `ended_at`."""

    __tablename__ = "wait_records"
    __table_args__ = (
        Index("ix_wait_records_owner_ended_at", "owner", "ended_at", "helper_id", "seq"),
        Index("ix_wait_records_ended_at", "ended_at"),
    )

    owner: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    helper_id: Mapped[str] = mapped_column(String(ID_MAX_CHARS), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    session_id: Mapped[str | None] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    question_id: Mapped[str] = mapped_column(String(64))
    ended: Mapped[str] = mapped_column(String(16))
    ended_at: Mapped[datetime]
    reminders_sent: Mapped[int] = mapped_column(Integer)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    asked_grant: Mapped[str | None] = mapped_column(Text)
    granted: Mapped[str | None] = mapped_column(Text)
    decided_by: Mapped[str | None] = mapped_column(String(64))
    decided_via: Mapped[str | None] = mapped_column(String(64))
    decided_through: Mapped[str | None] = mapped_column(String(8))
    follow_up: Mapped[str | None] = mapped_column(String(ID_MAX_CHARS))
    language: Mapped[str] = mapped_column(String(8))
    shown_text: Mapped[str] = mapped_column(Text)
    shown_choices: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    shown_sha256: Mapped[str] = mapped_column(String(64))
    asked_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
