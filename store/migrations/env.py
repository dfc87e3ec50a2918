"""Alembic environment: runs on a connection handed over by `store.database.migrate`."""

from __future__ import annotations

from alembic import context

from store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `python -m store migrate`, which passes the connection")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
