"""Passage vectors live beside the passages (`passage_vectors`, migration 0026), as message
vectors do: a passage stored without one waits for the embedding worker, archival search
finds it by meaning once it has one, its vector goes with it (forget) and nobody else's
does; the migration moves every vector and its downgrade puts them back."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate, serve_as_app_role
from core.config import EngineConfig
from core.directory import ensure_agent
from core.memory.embeddings import embed_missing
from core.memory.search import archival_search
from core.memory.store import AgentStore
from tests.fake_openai import embed_text
from tests.test_hybrid_recall import BagOfWords
from tests.test_message_vectors import _alembic

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
NOTES = ["my sister lives in Porto", "we sail every summer", "the boat is called Gull"]


async def member_who_noted(sessions, tenant: str, user: str, notes=NOTES):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, tenant, user, EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for note in notes:
            await store.add_passage(note, NOW, "agent")
    return scope


async def embedded_notes(sessions, scope) -> list[str]:
    """The texts of the member's passages that have a vector (operator-wide query)."""
    async with sessions() as session:
        rows = await session.scalars(
            text(
                "SELECT p.text FROM passage_vectors v JOIN passages p "
                "ON p.tenant_id = v.tenant_id AND p.id = v.passage_id "
                "WHERE v.agent_id = :agent AND v.embedding IS NOT NULL ORDER BY p.id"
            ),
            {"agent": scope.agent_id},
        )
        return list(rows)


async def found_by_meaning(sessions, scope, words: str) -> list[str]:
    async with sessions() as session:
        page = await archival_search(session, scope, "zzz", embed_text(words, 16), 1, 5)
    return [hit.text for hit in page.hits]


async def test_a_passage_waits_for_its_vector_then_is_found_by_meaning(sessions):
    ann = await member_who_noted(sessions, "g", "ann")
    assert await embedded_notes(sessions, ann) == []
    assert await found_by_meaning(sessions, ann, NOTES[2]) == []
    assert await embed_missing(sessions, BagOfWords()) == len(NOTES)
    assert await embedded_notes(sessions, ann) == NOTES
    assert (await found_by_meaning(sessions, ann, "the boat is called Gull"))[0] == NOTES[2]


async def test_forget_me_takes_the_members_passage_vectors_and_keeps_everyone_elses(
    sessions, members
):
    ann = await member_who_noted(sessions, "g", "ann")
    bob = await member_who_noted(sessions, "g", "bob", ["I collect stamps"])
    await embed_missing(sessions, BagOfWords())
    assert await members.forget("g", "ann")
    assert await embedded_notes(sessions, ann) == []
    assert await embedded_notes(sessions, bob) == ["I collect stamps"]
    async with sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM passage_vectors")) == 1


async def planner_knows(pg_url: str, schema: str, table: str) -> list[str]:
    """The columns of `table` the planner has statistics for (read as the superuser: the
    wall hides them from the app's role)."""
    admin = make_engine(pg_url)
    try:
        async with admin.connect() as connection:
            names = await connection.scalars(
                text("SELECT attname FROM pg_stats WHERE schemaname = :s AND tablename = :t"),
                {"s": schema, "t": table},
            )
            return sorted(names)
    finally:
        await admin.dispose()


async def test_the_migration_moves_every_passage_vector_and_the_downgrade_puts_them_back(
    pg_url,
):
    schema = f"moved_passage_vectors_{os.getpid()}"
    engine = make_engine(await serve_as_app_role(pg_url, schema), schema=schema)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.upgrade, "0025")
            await connection.commit()
        async with sessions() as session, session.begin():
            scope = await ensure_agent(session, "t", "u", EngineConfig())
            for i, note in enumerate(NOTES):
                vector = str(embed_text(note, 16)) if i < 2 else None
                await session.execute(
                    text(
                        "INSERT INTO passages (tenant_id, agent_id, text, embedding, created_at) "
                        "VALUES (:t, :a, :text, CAST(:v AS vector), now())"
                    ),
                    {"t": scope.tenant_id, "a": scope.agent_id, "text": note, "v": vector},
                )
        assert await migrate(engine, 16) == 16  # to the newest revision, 0026 among them

        assert await embedded_notes(sessions, scope) == NOTES[:2]
        async with sessions() as session:
            column = await session.scalar(
                text(
                    "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                    ":s AND table_name = 'passages' AND column_name = 'embedding'"
                ),
                {"s": schema},
            )
        assert column == 0
        assert "agent_id" in await planner_knows(pg_url, schema, "passage_vectors")
        assert (await found_by_meaning(sessions, scope, NOTES[1]))[0] == NOTES[1]
        assert await embed_missing(sessions, BagOfWords()) == 1  # the one still waiting

        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.downgrade, "0025")
            await connection.commit()
        async with sessions() as session:
            back = await session.scalars(
                text("SELECT embedding IS NOT NULL FROM passages ORDER BY id")
            )
            assert list(back) == [True, True, True]
            assert await session.scalar(text("SELECT to_regclass('passage_vectors')")) is None
        assert await migrate(engine, 16) == 16  # and up again
        assert await embedded_notes(sessions, scope) == NOTES
    finally:
        await engine.dispose()
