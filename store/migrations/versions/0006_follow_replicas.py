"""Which replica follows a running helper, and when each replica last said it is alive (R46): a replica found
silent has its follows started again elsewhere at once, instead of when their heartbeat timeout runs out.

Nullable column and a new table: workers of the previous release keep inserting and updating rows during a
rollout, and simply leave both alone (their follows are found late, as before).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("followed_by", sa.String(200)))
    op.create_table(
        "follow_replicas",
        sa.Column("identity", sa.String(200), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("identity", name="pk_follow_replicas"),
    )


def downgrade() -> None:
    op.drop_table("follow_replicas")
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("followed_by")
