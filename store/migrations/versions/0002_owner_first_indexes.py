"""Owner-first indexes: every read Iva makes on a chat turn (`unreported`, `list`, a place in the queue) names one
owner, so its index starts with the owner and the read stays flat however many owners there are (R43). The
state-only index led SQLite's planner (which has no statistics unless ANALYZE runs) to scan every owner's
unreported rows; nothing reads by state alone, so it goes.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_helper_rows_owner_state_seq", "helper_rows", ["owner", "state", "seq"])
    op.create_index("ix_helper_rows_owner_seq", "helper_rows", ["owner", "seq"])
    op.drop_index("ix_helper_rows_state", table_name="helper_rows")
