"""Deleting a member, or a community, never reads a whole table: every foreign key of the
migrated schema has an index that starts with its columns, so the cascade from a deleted
agent (a reset, an erase, an import that replaces a member) finds the rows that go by index.

Without `message_vectors_agent` (migration 0025), deleting one member with 3,800 messages
among 400,000 vectors took 0.3-2.6 s in the vectors' cascade alone.
"""

from __future__ import annotations

from sqlalchemy import text

# Each foreign key and whether some index of its table can find the rows that point to one
# row: an index that starts with the key's columns (in any order), or with one of them other
# than tenant_id (ids are unique across tenants: `summaries_agent` is (agent_id, id)).
UNINDEXED = """
SELECT c.conrelid::regclass::text AS tbl, c.conname,
       c.confrelid::regclass::text AS target,
       EXISTS (
           SELECT 1 FROM pg_index i
           WHERE i.indrelid = c.conrelid AND (
               (SELECT array_agg(k ORDER BY k)
                FROM unnest((i.indkey::int2[])[0:cardinality(c.conkey) - 1]) k)
                   = (SELECT array_agg(k ORDER BY k) FROM unnest(c.conkey) k)
               OR (i.indkey::int2[])[0] IN (
                   SELECT k FROM unnest(c.conkey) k
                   JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k
                   WHERE a.attname <> 'tenant_id'
               )
           )
       ) AS indexed
FROM pg_constraint c
JOIN pg_namespace n ON n.oid = c.connamespace
WHERE n.nspname = current_schema() AND c.contype = 'f'
"""

# Tables that may be read in full when a row their foreign key points to goes, and why that
# is cheap enough.
SMALL = {
    "dm_homes": "its key to tenants is read once per erased community, not per member; "
    "one narrow row per member who wrote a direct message",
}


async def test_every_foreign_key_has_an_index_that_starts_with_its_columns(sessions):
    async with sessions() as session:
        rows = (await session.execute(text(UNINDEXED))).all()
    assert any(table == "message_vectors" for table, *_ in rows)  # the query sees the schema
    missing = sorted(
        f"{table}.{name} -> {target}"
        for table, name, target, indexed in rows
        if not indexed and table not in SMALL
    )
    assert missing == [], "foreign keys a delete must scan for: " + "; ".join(missing)
