"""An owner's waits in one place, and a record of each (R56): a delivered row's wait bound and reminder offsets, which
the inbox reads; and the table of ended waits (how each ended, who answered and through what, what the row showed,
with its digest), kept `HELPER_AUDIT_KEEP_MS` after the end, beyond the row.

Nullable columns and a new table: workers of the previous release leave both alone during a rollout (the waits
they deliver show no bound in the inbox, the waits they end have no record).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("wait_ends_at", sa.DateTime(timezone=True)))
    op.add_column("helper_rows", sa.Column("wait_reminders_ms", sa.JSON()))
    op.create_table(
        "wait_records",
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("helper_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(200)),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("question_id", sa.String(64), nullable=False),
        sa.Column("ended", sa.String(16), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reminders_sent", sa.Integer(), nullable=False),
        sa.Column("answer", sa.JSON()),
        sa.Column("asked_grant", sa.Text()),
        sa.Column("granted", sa.Text()),
        sa.Column("decided_by", sa.String(64)),
        sa.Column("decided_via", sa.String(64)),
        sa.Column("decided_through", sa.String(8)),
        sa.Column("follow_up", sa.String(64)),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("shown_text", sa.Text(), nullable=False),
        sa.Column("shown_choices", sa.JSON()),
        sa.Column("shown_sha256", sa.String(64), nullable=False),
        sa.Column("asked_at", sa.DateTime(timezone=True)),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("owner", "helper_id", "seq", name="pk_wait_records"),
    )
    op.create_index("ix_wait_records_owner_ended_at", "wait_records", ["owner", "ended_at", "helper_id", "seq"])
    op.create_index("ix_wait_records_ended_at", "wait_records", ["ended_at"])


def downgrade() -> None:
    op.drop_table("wait_records")
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("wait_reminders_ms")
        table.drop_column("wait_ends_at")
