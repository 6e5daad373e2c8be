"""Every key of a member's data includes tenant_id: ready for a distributed Postgres.

Citus (and any Postgres sharded by tenant) places each row by a distribution column and can
enforce a primary key, a unique constraint or a foreign key only when it includes that
column. With `tenant_id` as the distribution column, a community's rows stay together and
every turn touches one node. So:

    primary keys     (tenant_id, id) on users, agents, messages, summaries, passages,
                     events, outbox, audit_log; (tenant_id, agent_id, label) on blocks,
                     (tenant_id, agent_id, day) on usage
    unique           agents (tenant_id, user_id); events (tenant_id, agent_id, dedup_key)
    foreign keys     (tenant_id, agent_id) -> agents (tenant_id, id), and
                     (tenant_id, user_id) -> users (tenant_id, id), all ON DELETE CASCADE

Ids stay unique (one identity sequence per table); a plain index on `id` keeps lookups by id
alone fast. The tables that are not a member's data (tenants, meta, web_sessions, dm_homes,
Slack's installations) keep their keys: tests/test_citus_ready.py says why, table by table.
Rebuilding the keys rewrites each table's indexes once, under exclusive locks: on a large
database, expect the upgrade to take about as long as a REINDEX of those tables, and stop the
other replicas while it runs (beside busy replicas it may hit a deadlock; the process then
exits and the next start tries again).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
rewrites_tables = True  # rebuilds every key of every member table

BY_ID = ("users", "agents", "messages", "summaries", "passages", "events", "outbox", "audit_log")
INDEXED_ID = ("users", "agents", "messages", "summaries", "passages", "events", "outbox")
OF_AGENT = ("blocks", "messages", "summaries", "passages", "events", "outbox", "usage")
OTHER_KEYS = {"blocks": "agent_id, label", "usage": "agent_id, day"}


def upgrade() -> None:
    for table in OF_AGENT:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_agent_id_fkey")
    for table in ("agents", "dm_homes"):
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_user_id_fkey")
    op.execute("ALTER TABLE agents DROP CONSTRAINT agents_user_id_key")
    op.execute("ALTER TABLE events DROP CONSTRAINT events_agent_id_dedup_key_key")
    for table in BY_ID:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY (tenant_id, id)"
        )
    for table, columns in OTHER_KEYS.items():
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY (tenant_id, {columns})"
        )
    for table in INDEXED_ID:
        op.execute(f"CREATE INDEX {table}_id ON {table} (id)")
    op.execute("ALTER TABLE agents ADD CONSTRAINT agents_user_id_key UNIQUE (tenant_id, user_id)")
    op.execute(
        "ALTER TABLE events ADD CONSTRAINT events_agent_id_dedup_key_key "
        "UNIQUE (tenant_id, agent_id, dedup_key)"
    )
    for table in OF_AGENT:
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_agent_id_fkey FOREIGN KEY "
            "(tenant_id, agent_id) REFERENCES agents (tenant_id, id) ON DELETE CASCADE"
        )
    for table in ("agents", "dm_homes"):
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_user_id_fkey FOREIGN KEY "
            "(tenant_id, user_id) REFERENCES users (tenant_id, id) ON DELETE CASCADE"
        )


def downgrade() -> None:
    for table in OF_AGENT:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_agent_id_fkey")
    for table in ("agents", "dm_homes"):
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_user_id_fkey")
    op.execute("ALTER TABLE agents DROP CONSTRAINT agents_user_id_key")
    op.execute("ALTER TABLE events DROP CONSTRAINT events_agent_id_dedup_key_key")
    for table in INDEXED_ID:
        op.execute(f"DROP INDEX {table}_id")
    for table in BY_ID:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY (id)"
        )
    for table, columns in OTHER_KEYS.items():
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY ({columns})"
        )
    op.execute("ALTER TABLE agents ADD CONSTRAINT agents_user_id_key UNIQUE (user_id)")
    op.execute(
        "ALTER TABLE events ADD CONSTRAINT events_agent_id_dedup_key_key "
        "UNIQUE (agent_id, dedup_key)"
    )
    for table in OF_AGENT:
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_agent_id_fkey FOREIGN KEY "
            "(agent_id) REFERENCES agents (id) ON DELETE CASCADE"
        )
    for table in ("agents", "dm_homes"):
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_user_id_fkey FOREIGN KEY "
            "(user_id) REFERENCES users (id) ON DELETE CASCADE"
        )
