"""The row's column naming the worker replica a follow attempt runs on is `follow_replica`, apart in name from
`followed_up_by` (the follow-up helper that continues the row).

Only adds, a nullable column: workers of the previous release (1.3.0) keep running during the rollout and go on
writing and reading `followed_by`, which this code no longer uses. `followed_by` stays until a later release
drops it, once no 1.3.0 worker runs (docs/operations.md, "Upgrading").

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("follow_replica", sa.String(200)))


def downgrade() -> None:
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("follow_replica")
