"""Searches by meaning go through the HNSW indexes, whatever the vectors' size.

The vectors are stored in half precision and indexed as stored (migration 0027; a
re-embedding run rebuilds the indexes for its size), and a search uses one only when it
orders by the very same expression: a mismatch would not fail, it would scan every vector of
the table, slower with every message.
The plans are read with sequential and bitmap scans and sorts discouraged, so an empty test
table still shows whether the index can serve the statement the product sends.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.reembed import adopt_dimension
from core.memory.search import archival_search, recall_search
from core.memory.store import AgentStore


class Statements:
    """The SQL statements sent that order by vector distance."""

    def __init__(self, sessions) -> None:
        self.seen: list[tuple[str, Any]] = []
        event.listen(sessions.kw["bind"].sync_engine, "before_cursor_execute", self._keep)

    def _keep(self, _conn, _cursor, statement, parameters, *_: Any) -> None:
        if "<=>" in statement and not statement.lstrip().startswith("EXPLAIN"):
            self.seen.append((statement, parameters))


async def plans_of(sessions, scope, dim: int) -> list[str]:
    statements = Statements(sessions)
    vector = [1.0] + [0.0] * (dim - 1)
    async with sessions() as session, session.begin():
        await recall_search(session, scope, "lemon cake", 1, 5, None, vector)
        await archival_search(session, scope, "", vector, 1, 5)
        conn = await session.connection()
        for scan in ("seqscan", "bitmapscan", "sort"):  # what an empty table would use
            await conn.exec_driver_sql(f"SET LOCAL enable_{scan} = off")
        plans = []
        for statement, parameters in statements.seen:
            rows = await conn.exec_driver_sql("EXPLAIN " + statement, parameters)
            plans.append("\n".join(row[0] for row in rows))
    assert len(plans) == 2, "one statement by meaning per search"
    return plans


@pytest.mark.parametrize("dim", [16, 3072])
async def test_searches_by_meaning_use_the_vector_indexes(engine, sessions, dim):
    scope = await engine.agent("discord:1", "ann")
    if dim != 16:  # the test schema's size; 3,072 (text-embedding-3-large) is over
        assert await adopt_dimension(sessions, dim)  # full precision's 2,000 for HNSW
    recall, archival = await plans_of(sessions, scope, dim)
    assert "message_vectors_embedding" in recall, recall
    assert "passage_vectors_embedding" in archival, archival


_fresh = itertools.count()


async def test_a_new_database_for_a_3072_number_model_migrates_with_its_indexes(pg_url, engine):
    """text-embedding-3-large: full-precision HNSW stops at 2,000 numbers, so the first
    migrations make no vector index at that size and 0020 makes the half-precision ones."""
    name = f"wide{next(_fresh)}"
    admin = make_engine(pg_url)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {name}"))
    await admin.dispose()
    wide = make_engine(pg_url, schema=name)
    try:
        assert await migrate(wide, 3072) == 3072
        sessions = async_sessionmaker(wide, expire_on_commit=False)
        async with sessions() as session, session.begin():
            scope = await ensure_agent(session, "discord:1", "ann", EngineConfig())
        recall, archival = await plans_of(sessions, scope, 3072)
        assert "message_vectors_embedding" in recall and "passage_vectors_embedding" in archival
    finally:
        await wide.dispose()


async def test_a_search_run_again_and_again_is_planned_for_its_own_vector(engine, sessions):
    """The statements are prepared once per connection and run again and again. After five
    runs Postgres may plan a statement once for any values (a generic plan), and for the
    nearest rows that plan sorts all of the member's vectors instead of walking the index:
    4.5 s instead of 25 ms at 1536 dimensions and 30k passages. Each search is planned for
    its own vector."""
    scope = await engine.agent("discord:1", "ann")
    async with sessions() as session, session.begin():
        for turn in range(8):
            vector = [float(turn + 1)] + [1.0] * 15
            await recall_search(session, scope, "lemon cake", 1, 5, None, vector)
            await archival_search(session, scope, "lemon cake", vector, 1, 5)
        plans = (
            await session.execute(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%<=>%' AND statement NOT LIKE '%generic_plans%'"
                )
            )
        ).all()
    assert len(plans) == 2, plans  # the nearest messages, the nearest passages
    assert all(generic == 0 and custom == 8 for generic, custom in plans), plans


@pytest.mark.parametrize("dim", [1536, 3072])
async def test_a_members_vectors_are_read_from_the_row_not_from_toast(engine, sessions, dim):
    """A member whose rows the HNSW index does not serve has their vectors compared one by
    one; each one read from TOAST cost three or four more block reads (142 ms instead of 31
    for 30,000 vectors of 1536 numbers). Half precision keeps up to about 4,000 numbers in
    the row, also after a change of size (here through `adopt_dimension`)."""
    scope = await engine.agent("discord:1", "ann")
    assert await adopt_dimension(sessions, dim)
    async with sessions() as session, session.begin():
        store = AgentStore(session, scope, max_message_tokens=1000)
        await store.add_passage("a long note", datetime.now(UTC), embedding=[0.5] * dim)
        out_of_line = await session.scalar(
            text(
                "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
                "WHERE oid = CAST('passage_vectors' AS regclass)"
            )
        )
    assert out_of_line == 0
