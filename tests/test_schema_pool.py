"""A schema a test is done with is handed to the next test only as a new copy would be
(tests/schema_pool.py): no row, sequence position or planner statistic of the test before,
the rows every copy starts with back; and never once a test changed its definitions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from bot.database import make_engine
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.reembed import adopt_dimension
from core.memory.store import AgentStore
from tests.conftest import _new_schema, _pool, _sessions_on
from tests.test_schema_copy import dump, without_name_and_secret

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


async def as_superuser(pg_url: str, schema: str, *statements: str) -> None:
    admin = make_engine(pg_url, schema=schema, pool_size=1)
    try:
        async with admin.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await admin.dispose()


async def counts(pg_url: str, schema: str) -> dict[str, int]:
    """Rows of each table of `schema` (as the superuser: row-level security hides none)."""
    admin = make_engine(pg_url, pool_size=1)
    try:
        async with admin.connect() as conn:
            tables = list(
                await conn.scalars(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY 1"),
                    {"s": schema},
                )
            )
            return {
                table: int(await conn.scalar(text(f'SELECT count(*) FROM {schema}."{table}"')))
                for table in tables
            }
    finally:
        await admin.dispose()


async def use(pg_url: str, schema: str) -> None:
    """What tests leave behind: members with messages and notes, a sequence moved on a
    table left empty, a row deleted, a row a copy starts with changed, statistics."""
    async with _sessions_on(pg_url, schema) as sessions:
        for user in ("ann", "bob"):
            async with sessions() as session, session.begin():
                scope = await ensure_agent(session, "g", user, EngineConfig())
                store = AgentStore(session, scope, EngineConfig().max_message_tokens)
                await store.append(NOW, role="user", content="hi", search_text="hi there")
                await store.add_passage("my sister lives in Porto", NOW, "agent")
    await as_superuser(
        pg_url,
        schema,
        "SELECT nextval('slack_bots_id_seq')",
        "INSERT INTO spent_links (nonce, expires_at) VALUES ('n', now())",
        "DELETE FROM spent_links",
        "UPDATE meta SET value = '17' WHERE key = 'embedding_dim'",
        "ANALYZE slack_bots",  # an empty table: no column statistics, only its counts
    )


async def test_a_schema_given_back_is_handed_out_again_as_a_new_copy_is(pg_url):
    pool = _pool(pg_url)
    name = await pool.take()
    await use(pg_url, name)
    used = await counts(pg_url, name)
    assert used["messages"] == 2 and used["passages"] == 2 and used["tenants"] == 1
    pool.give_back(name)

    again = await pool.take()
    try:
        assert again == name  # the same schema, not a new copy
        assert {table: n for table, n in (await counts(pg_url, name)).items() if n} == {
            "alembic_version": 1,
            "meta": 1,
            "signing_secret": 1,
        }
        new = await _new_schema(pg_url)
        assert without_name_and_secret(await dump(pg_url, name), name).splitlines() == (
            without_name_and_secret(await dump(pg_url, new), new).splitlines()
        )  # rows, sequences (setval) and planner statistics as in a new copy
        async with _sessions_on(pg_url, name) as sessions, sessions() as session:
            assert await session.scalar(text("SELECT nextval('messages_id_seq')")) == 1
            assert await session.scalar(text("SELECT value FROM meta")) == "16"
    finally:
        pool.give_back(again)


CHANGES = {
    "a column added": ["ALTER TABLE messages ADD COLUMN extra int"],
    "an index added": ["CREATE INDEX messages_extra ON messages (id DESC)"],
    "a policy dropped": ["DROP POLICY member_scope ON messages"],
    "row-level security not forced": ["ALTER TABLE messages NO FORCE ROW LEVEL SECURITY"],
    "a grant": ["GRANT SELECT ON meta TO PUBLIC"],
    "a function rewritten": [
        "CREATE OR REPLACE FUNCTION companion_scope_holds() RETURNS boolean "
        "LANGUAGE sql AS $$ SELECT true $$"
    ],
    "a table added": ["CREATE TABLE extra (id int)"],
    "a table made again": [
        "CREATE TABLE spent_links_again (LIKE spent_links INCLUDING ALL)",
        "DROP TABLE spent_links",
        "ALTER TABLE spent_links_again RENAME TO spent_links",
    ],
    "a sequence's step": ["ALTER SEQUENCE messages_id_seq INCREMENT BY 2"],
    "a comment": ["COMMENT ON TABLE meta IS 'changed'"],
    "a default": ["ALTER TABLE meta ALTER COLUMN value SET DEFAULT 'x'"],
    "the schema dropped": ["DROP SCHEMA {schema} CASCADE"],
    "the schema renamed": ["ALTER SCHEMA {schema} RENAME TO {schema}_renamed"],
    "column statistics": [
        "INSERT INTO spent_links (nonce, expires_at) VALUES ('n', now())",
        "ANALYZE spent_links",
    ],
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
async def test_a_schema_whose_definitions_changed_is_never_handed_out_again(pg_url, change):
    pool = _pool(pg_url)
    name = await pool.take()
    await as_superuser(pg_url, name, *(sql.format(schema=name) for sql in CHANGES[change]))
    pool.give_back(name)
    await changed_is_dropped(pg_url, name)


async def test_a_schema_with_vectors_of_another_size_is_never_handed_out_again(pg_url):
    """`companion reembed` and the local embedder change the vectors' size (a DDL)."""
    pool = _pool(pg_url)
    name = await pool.take()
    async with _sessions_on(pg_url, name) as sessions:
        assert await adopt_dimension(sessions, 32)
    pool.give_back(name)
    await changed_is_dropped(pg_url, name)


async def changed_is_dropped(pg_url: str, name: str) -> None:
    pool = _pool(pg_url)
    again = await pool.take()
    try:
        assert again != name and name in pool.dropped
        admin = make_engine(pg_url, pool_size=1)
        async with admin.connect() as conn:
            assert not await conn.scalar(
                text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"), {"s": name}
            )
        await admin.dispose()
    finally:
        pool.give_back(again)


async def test_a_schema_a_transaction_still_holds_is_not_handed_out(pg_url):
    """A connection a test left open in a transaction on a table: that schema is not
    emptied under it (nor waited for); the next test gets another one."""
    pool = _pool(pg_url)
    name = await pool.take()
    await use(pg_url, name)
    holder = make_engine(pg_url, schema=name, pool_size=1)
    try:
        async with holder.connect() as conn:
            await conn.execute(text("SELECT count(*) FROM messages"))  # holds its lock
            pool.give_back(name)
            again = await pool.take()
            pool.give_back(again)
            assert again != name and name in pool.dropped
            await conn.rollback()
    finally:
        await holder.dispose()
