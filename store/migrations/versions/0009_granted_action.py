"""A grant's follow-up keeps the action granted and the one asked (R55): the row's `granted_action`, whose action its
session's create carries to the core as a grant performed at most once, or adds to the boundary of a core that cannot
honour one once.

A nullable column: workers of the previous release leave it alone during a rollout (the follow-ups they admit carry
their grant in the boundary, as before).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("helper_rows", sa.Column("granted_action", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("helper_rows") as table:
        table.drop_column("granted_action")
