"""The first schema: helper rows, usage, chat events, parked sessions.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

moment = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "helper_rows",
        sa.Column("owner", sa.String(64), primary_key=True),
        sa.Column("helper_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("goal_id", sa.String(64)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("boundary", sa.JSON, nullable=False),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("limits", sa.JSON, nullable=False),
        sa.Column("session_id", sa.String(200)),
        sa.Column("finish_requested", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
        sa.Column("work_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_message", sa.Text, nullable=False, server_default=""),
        sa.Column("outcome_kind", sa.String(16)),
        sa.Column("summary", sa.Text),
        sa.Column("actions", sa.JSON, nullable=False),
        sa.Column("result_dir", sa.String(500), nullable=False),
        sa.Column("admitted_at", moment, nullable=False),
        sa.Column("started_at", moment),
        sa.Column("deadline_at", moment),
        sa.Column("finished_at", moment),
        sa.Column("delivered_at", moment),
        sa.Column("keep_until", moment),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("updated_at", moment, nullable=False),
        sa.PrimaryKeyConstraint("owner", "helper_id", name="pk_helper_rows"),
    )
    op.create_index("ix_helper_rows_state", "helper_rows", ["state"])
    op.create_table(
        "helper_usage",
        sa.Column("owner", sa.String(64), primary_key=True),
        sa.Column("helper_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("goal_id", sa.String(64)),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("outcome_kind", sa.String(16), nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("work_tokens", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("started_at", moment),
        sa.Column("finished_at", moment, nullable=False),
        sa.PrimaryKeyConstraint("owner", "helper_id", "seq", name="pk_helper_usage"),
    )
    op.create_table(
        "chat_events",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("helper_ids", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("receipt_id", sa.String(200)),
        sa.Column("last_error", sa.Text),
        sa.Column("updated_at", moment, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_chat_events"),
    )
    op.create_index("ix_chat_events_owner", "chat_events", ["owner"])
    op.create_table(
        "parked_sessions",
        sa.Column("session_id", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("helper_id", sa.String(64), nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("parked_at", moment, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_parked_sessions"),
    )
    op.create_index("ix_parked_sessions_owner", "parked_sessions", ["owner"])


def downgrade() -> None:
    op.drop_table("parked_sessions")
    op.drop_table("chat_events")
    op.drop_table("helper_usage")
    op.drop_table("helper_rows")
