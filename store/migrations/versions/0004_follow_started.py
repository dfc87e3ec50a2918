"""When a worker began following a running helper's session: a row granted a slot whose follow no worker has
picked up yet (every follow slot taken) shows as running with no follow start.

Nullable, no default: workers of the previous release keep inserting and updating rows during a rollout.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("follow_started_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("follow_started_at")
