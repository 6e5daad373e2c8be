"""The schema is ready for a distributed Postgres (Citus) with `tenant_id` as the
distribution column: every primary key, unique constraint and foreign key of the migrated
schema includes `tenant_id`, or its table is below with the reason why it need not.

Under Citus, the tables of a member's data are distributed by tenant_id (a community's rows
on one node, each turn on one node); `tenants` and the small lookup tables are reference
tables (a copy on every node) or stay on the coordinator.
"""

from __future__ import annotations

from sqlalchemy import text

CONSTRAINTS = """
SELECT c.conrelid::regclass::text, c.conname, c.contype::text,
       array_agg(a.attname::text ORDER BY a.attname)
FROM pg_constraint c
JOIN pg_namespace n ON n.oid = c.connamespace
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
WHERE n.nspname = current_schema() AND c.contype IN ('p', 'u', 'f')
GROUP BY 1, 2, 3
"""

# Tables whose keys need not include tenant_id, and why.
NOT_DISTRIBUTED = {
    "tenants": "the distribution column's own table: tenant_id is its id (a reference table)",
    "alembic_version": "the schema's version, one row (coordinator)",
    "meta": "settings of the installation such as the embedding dimension (coordinator)",
    "web_sessions": "looked up by the hash of a browser's token before the tenant is known; "
    "few rows (a reference table, or the coordinator)",
    "signing_secret": "one row, the installation's link-signing secret (coordinator)",
    "spent_links": "a used sign-in link's nonce, looked up before any tenant is known; no "
    "member's data (a reference table, or the coordinator)",
    "dm_homes": "looked up by (platform, user) to find which tenant a DM belongs to, so it "
    "cannot be keyed by that tenant (a reference table; its foreign key to users, "
    "which includes tenant_id, becomes a delete in the application: forget does it already)",
    "slack_installations": "slack_sdk's store: looked up by Slack's team id before the tenant "
    "is known; one row per install (coordinator)",
    "slack_bots": "slack_sdk's store, as slack_installations",
    "slack_oauth_states": "installs in progress, before any tenant exists",
}


async def test_every_key_of_a_members_data_includes_tenant_id(sessions):
    async with sessions() as session:
        rows = (await session.execute(text(CONSTRAINTS))).all()
    tables = {table for table, *_ in rows}
    assert "messages" in tables and "agents" in tables  # the query sees the schema
    missing = sorted(
        f"{table}.{name} ({', '.join(columns)})"
        for table, name, kind, columns in rows
        if "tenant_id" not in columns and table not in NOT_DISTRIBUTED
    )
    assert missing == [], "keys without tenant_id: " + "; ".join(missing)


async def test_foreign_keys_between_member_tables_reference_the_tenant_too(sessions):
    """A foreign key from one distributed table to another must join on tenant_id too
    (Citus co-locates by it); one to `tenants` (a reference table) need not."""
    query = """
        SELECT c.conrelid::regclass::text, c.conname, c.confrelid::regclass::text,
               array_agg(a.attname::text)
        FROM pg_constraint c
        JOIN pg_namespace n ON n.oid = c.connamespace
        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = ANY (c.confkey)
        WHERE n.nspname = current_schema() AND c.contype = 'f'
        GROUP BY 1, 2, 3
    """
    async with sessions() as session:
        rows = (await session.execute(text(query))).all()
    wrong = sorted(
        f"{table}.{name} -> {target}({', '.join(columns)})"
        for table, name, target, columns in rows
        if target not in NOT_DISTRIBUTED and "tenant_id" not in columns
    )
    assert rows and wrong == [], wrong
