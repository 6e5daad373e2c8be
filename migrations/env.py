"""Alembic environment: runs on a connection handed in by `bot.database.migrate`."""

from alembic import context

from core.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata)
with context.begin_transaction():
    context.run_migrations()
