"""Message vectors live beside the messages (`message_vectors`, migration 0018): they go
with their messages when a member is forgotten, reset, replaced by an import or erased with
the community, and nobody else's go with them; the migration that moved them there kept
every one, and its downgrade puts them back."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate, serve_as_app_role
from bot.migrations import MIGRATIONS
from core.config import EngineConfig
from core.directory import ensure_agent, find_agent
from core.members.portability import parse_export
from core.memory.embeddings import embed_missing
from core.memory.search import recall_search
from core.memory.store import AgentStore
from core.tenants.tenancy import Tenancy
from tests.fake_openai import embed_text
from tests.test_hybrid_recall import BagOfWords

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LINES = ["my sister lives in Porto", "we sail every summer", "the boat is called Gull"]


async def member_who_said(sessions, tenant: str, user: str, lines=LINES):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, tenant, user, EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for i, words in enumerate(lines):
            await store.append(
                T0 + timedelta(minutes=i), role="user", content=words, search_text=words
            )
        await store.append(T0, role="tool", content="{}")  # nothing a person said: no vector
    await embed_missing(sessions, BagOfWords())
    return scope


async def vectors_of(sessions, scope) -> list[str]:
    """The texts of the member's messages that have a vector (operator-wide query)."""
    async with sessions() as session:
        rows = await session.scalars(
            text(
                "SELECT m.search_text FROM message_vectors v JOIN messages m "
                "ON m.tenant_id = v.tenant_id AND m.id = v.message_id "
                "WHERE v.agent_id = :agent AND v.embedding IS NOT NULL ORDER BY m.id"
            ),
            {"agent": scope.agent_id},
        )
        return list(rows)


async def all_vector_rows(sessions) -> int:
    async with sessions() as session:
        return int(await session.scalar(text("SELECT count(*) FROM message_vectors")) or 0)


async def found_by_meaning(sessions, scope, words: str) -> list[str]:
    async with sessions() as session:
        page = await recall_search(session, scope, "zzz", 1, 5, None, embed_text(words, 16))
    return [hit.text for hit in page.hits]


async def test_forget_me_takes_the_members_vectors_and_keeps_everyone_elses(sessions, members):
    ann = await member_who_said(sessions, "g", "ann")
    bob = await member_who_said(sessions, "g", "bob")
    assert await vectors_of(sessions, ann) == LINES
    assert await members.forget("g", "ann")
    assert await vectors_of(sessions, ann) == []
    assert await vectors_of(sessions, bob) == LINES
    assert await all_vector_rows(sessions) == len(LINES)
    assert (await found_by_meaning(sessions, bob, "the boat is called Gull"))[0] == LINES[2]


async def test_reset_and_import_keep_vectors_exactly_for_the_messages_there(sessions, members):
    ann = await member_who_said(sessions, "g", "ann")
    bob = await member_who_said(sessions, "g", "bob", ["I collect stamps"])
    saved = parse_export(await members.export("g", "ann"))

    assert await members.admin_reset("g", "admin", "ann")  # a fresh agent, memory gone
    assert await vectors_of(sessions, ann) == []
    assert await vectors_of(sessions, bob) == ["I collect stamps"]
    async with sessions() as session:
        ann = await find_agent(session, "g", "ann")
    assert await vectors_of(sessions, ann) == []

    await members.admin_import("g", "admin", "ann", saved)
    assert await vectors_of(sessions, ann) == []  # the worker's next pass embeds them
    assert await embed_missing(sessions, BagOfWords()) == len(LINES)
    assert await vectors_of(sessions, ann) == LINES

    replacement = saved.model_copy(update={"messages": saved.messages[:1]})
    await members.admin_import("g", "admin", "ann", replacement, replace=True)
    await embed_missing(sessions, BagOfWords())
    assert await vectors_of(sessions, ann) == LINES[:1]
    assert await vectors_of(sessions, bob) == ["I collect stamps"]
    assert await all_vector_rows(sessions) == 2


async def test_an_erased_community_leaves_no_vectors_and_its_neighbour_keeps_its_own(
    sessions, clock
):
    await member_who_said(sessions, "slack:T9", "U1")
    await member_who_said(sessions, "slack:T9", "U2")
    neighbour = await member_who_said(sessions, "slack:T8", "U1")
    assert await Tenancy(sessions, clock).erase("slack:T9", "operator test") is not None
    assert await all_vector_rows(sessions) == len(LINES)
    assert await vectors_of(sessions, neighbour) == LINES


# ---------------------------------------------------------------- the migration


def _alembic(connection, step, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = 16
    step(config, revision)


async def test_the_migration_moves_every_vector_and_the_downgrade_puts_them_back(pg_url):
    schema = f"moved_vectors_{os.getpid()}"
    engine = make_engine(await serve_as_app_role(pg_url, schema), schema=schema)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    said = ["tea with lemon", "a walk by the river", "waiting for its vector"]
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.upgrade, "0017")
            await connection.commit()
        async with sessions() as session, session.begin():
            scope = await ensure_agent(session, "t", "u", EngineConfig())
            for i, words in enumerate([*said, None]):
                vector = str(embed_text(words, 16)) if words and i < 2 else None
                await session.execute(
                    text(
                        "INSERT INTO messages (tenant_id, agent_id, role, search_text, "
                        "embedding, tokens, in_context, created_at) VALUES (:t, :a, 'user', "
                        ":words, CAST(:v AS vector), 0, false, now())"
                    ),
                    {"t": scope.tenant_id, "a": scope.agent_id, "words": words, "v": vector},
                )
        assert await migrate(engine, 16) == 16  # to the newest revision, 0018 among them

        async with sessions() as session:
            moved = (
                await session.execute(
                    text(
                        "SELECT m.search_text, v.embedding IS NOT NULL AS has FROM "
                        "message_vectors v JOIN messages m ON m.id = v.message_id ORDER BY m.id"
                    )
                )
            ).all()
            column = await session.scalar(
                text(
                    "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                    ":s AND table_name = 'messages' AND column_name = 'embedding'"
                ),
                {"s": schema},
            )
        assert [tuple(row) for row in moved] == [(said[0], True), (said[1], True), (said[2], False)]
        assert column == 0
        assert said[1] in await found_by_meaning(sessions, scope, said[1])
        assert await embed_missing(sessions, BagOfWords()) == 1  # the one still waiting

        async with engine.connect() as connection:
            await connection.run_sync(_alembic, command.downgrade, "0017")
            await connection.commit()
        async with sessions() as session:
            back = await session.scalars(
                text("SELECT embedding IS NOT NULL FROM messages ORDER BY id")
            )
            assert list(back) == [True, True, True, False]
            assert await session.scalar(text("SELECT to_regclass('message_vectors')")) is None
        assert await migrate(engine, 16) == 16  # and up again
        async with sessions() as session:
            count = await session.scalar(
                text("SELECT count(*) FROM message_vectors WHERE embedding IS NOT NULL")
            )
        assert count == 3
    finally:
        await engine.dispose()
