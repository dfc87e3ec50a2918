"""A question outcome's choices (R49): the question's id, the options offered and whether a free-text answer is
taken, as JSON beside the summary.

Nullable, no default: workers of the previous release keep inserting and updating rows during a rollout.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("choices", sa.JSON(none_as_null=True)))


def downgrade() -> None:
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("choices")
