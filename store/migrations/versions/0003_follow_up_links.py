"""Follow-ups: a row names the earlier helper it continues, and the earlier row names its follow-up;
sessions kept for a follow-up instead of being reset at once are listed until their cleanup.

Both columns are nullable and have no default, so workers of the previous release keep inserting and updating
rows during a rollout.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("follow_up_of", sa.String(64)))
    op.add_column("helper_rows", sa.Column("followed_up_by", sa.String(64)))
    op.create_table(
        "kept_sessions",
        sa.Column("session_id", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("helper_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("kept_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_kept_sessions"),
    )


def downgrade() -> None:
    op.drop_table("kept_sessions")
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("followed_up_by")
        table.drop_column("follow_up_of")
