"""Alembic's environment: migrate the connection marlaas.service.db.migrate hands over."""

from alembic import context

from marlaas.service.db import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata)
with context.begin_transaction():
    context.run_migrations()
