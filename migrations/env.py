"""Alembic environment: runs on a connection handed in by `bot.database.migrate`.

Each revision runs in a transaction of its own (committed with its version row), so a
start killed mid-way keeps the revisions already applied, and a revision may step out of
its transaction for what Postgres runs only outside one (`CREATE INDEX CONCURRENTLY`, in an
`autocommit_block`). `on_version_apply` (when handed in) hears of each revision applied.
"""

from alembic import context

from core.models import Base

attributes = context.config.attributes
context.configure(
    connection=attributes["connection"],
    target_metadata=Base.metadata,
    transaction_per_migration=True,
    on_version_apply=attributes.get("on_version_apply"),
    version_table_schema=attributes.get("version_table_schema"),
)
with context.begin_transaction():
    context.run_migrations()
