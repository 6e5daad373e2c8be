"""Which embedder runs, and the vector size the database holds.

COMPANION_EMBEDDING_MODEL unset: the local model (384 numbers); set: the endpoint's model at
COMPANION_EMBEDDING_DIM (1536 unless set); "none": full text only. A database that holds no
vector yet takes the embedder's size at start; one that holds vectors of another size is
refused with the command that re-embeds it, and `reembed` covers messages as well.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from bot.app import open_app
from bot.settings import Settings
from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError
from core.local_embedder import LocalEmbedder
from core.memory.reembed import change_dimension, reembed
from core.memory.search import recall_search
from core.memory.store import AgentStore
from tests.conftest import cli_env, run_cli
from tests.fake_openai import embed_text
from tests.test_hybrid_recall import BagOfWords

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def settings_for(fake, pg_url, schema, **extra: str) -> Settings:
    env = cli_env(fake, pg_url, schema, **extra)
    for name, value in extra.items():
        if value is None:
            env.pop(name)
    return Settings.from_env(env)


def test_the_local_model_is_the_default_and_its_size_is_fixed():
    assert Settings.from_env({}).embedding_dim == 384
    assert Settings.from_env({"COMPANION_EMBEDDING_DIM": "384"}).embedding_dim == 384
    assert Settings.from_env({"COMPANION_EMBEDDING_MODEL": "m"}).embedding_dim == 1536
    both = {"COMPANION_EMBEDDING_MODEL": "m", "COMPANION_EMBEDDING_DIM": "256"}
    assert Settings.from_env(both).embedding_dim == 256
    # an old key-words-only .env (DIM=1536, no model) keeps starting: the local size wins
    assert Settings.from_env({"COMPANION_EMBEDDING_DIM": "1536"}).embedding_dim == 384
    with pytest.raises(ConfigError, match="COMPANION_EMBEDDING_DIM must be a whole number"):
        Settings.from_env({"COMPANION_EMBEDDING_DIM": "many"})


async def held(sessions) -> tuple[str, str, str]:
    async with sessions() as session:
        meta = await session.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        types = (
            await session.execute(
                text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attname = 'embedding' AND NOT attisdropped AND attrelid IN "
                    "(CAST('message_vectors' AS regclass), CAST('passage_vectors' AS regclass)) "
                    "ORDER BY attrelid"
                )
            )
        ).scalars()
        return (meta, *types)


async def stored_message(sessions, vector: list[float] | None) -> None:
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        message = await AgentStore(session, scope, 2048).append(
            NOW, role="user", content="tea with lemon", search_text="tea with lemon"
        )
        if vector is not None:
            await session.execute(
                text(
                    "UPDATE message_vectors SET embedding = CAST(:v AS vector) "
                    "WHERE message_id = :id"
                ),
                {"v": str(vector), "id": message.id},
            )


async def test_a_database_without_vectors_takes_the_local_size_at_start(
    fake, pg_url, schema, sessions
):
    await stored_message(sessions, None)  # e.g. used without embeddings until now
    settings = settings_for(
        fake, pg_url, schema, COMPANION_EMBEDDING_MODEL=None, COMPANION_EMBEDDING_DIM=None
    )
    async with open_app(settings) as app:
        assert isinstance(app.embedder, LocalEmbedder)
        assert app.embedding_dim == 384
    assert await held(sessions) == ("384", "halfvec(384)", "halfvec(384)")


async def test_vectors_of_another_size_are_refused_with_the_command_that_fixes_it(
    fake, pg_url, schema, sessions
):
    await stored_message(sessions, embed_text("tea with lemon", 16))
    local = settings_for(
        fake, pg_url, schema, COMPANION_EMBEDDING_MODEL=None, COMPANION_EMBEDDING_DIM=None
    )
    with pytest.raises(ConfigError) as refused:
        async with open_app(local):
            pass
    assert "holds 16-dimension embeddings and the local embedding model gives 384" in str(
        refused.value
    )
    assert "`companion reembed --dim 384`" in str(refused.value)
    assert "COMPANION_EMBEDDING_DIM=16" in str(refused.value)
    async with open_app(local, need_model=False) as app:  # export, import, reset still work
        assert app.embedder is None
    assert await held(sessions) == ("16", "halfvec(16)", "halfvec(16)")  # nothing changed


async def test_none_means_full_text_only(fake, pg_url, schema):
    settings = settings_for(fake, pg_url, schema, COMPANION_EMBEDDING_MODEL="none")
    async with open_app(settings) as app:
        assert app.embedder is None and app.engine.embeddings is None


async def test_a_new_size_covers_messages_and_search_keeps_working(sessions):
    await stored_message(sessions, embed_text("tea with lemon", 16))
    await stored_message(sessions, None)
    assert await change_dimension(sessions, BagOfWords(24), 24) == 2  # with or without one
    assert await held(sessions) == ("24", "halfvec(24)", "halfvec(24)")
    async with sessions() as session:
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        page = await recall_search(session, scope, "lemon", 1, 5, None, embed_text("lemon", 24))
    assert page.hits and page.hits[0].text == "tea with lemon"
    assert await reembed(sessions, BagOfWords(24), only_missing=True) == 0


async def test_doctor_names_the_fix_for_vectors_of_another_size(fake, pg_url, schema, sessions):
    env = cli_env(fake, pg_url, schema)
    for name in ("COMPANION_EMBEDDING_MODEL", "COMPANION_EMBEDDING_DIM"):
        env.pop(name)
    await stored_message(sessions, None)
    fresh = await run_cli(env, "doctor")
    assert "ok   pgvector" in fresh.out and "take the embedder's 384 at the next start" in fresh.out
    assert "ok   local embedding model: all-MiniLM-L6-v2" in fresh.out
    await stored_message(sessions, embed_text("tea", 16))
    held = await run_cli(env, "doctor")
    line = next(x for x in held.out.splitlines() if "pgvector" in x)
    assert line.startswith("FAIL") and "run `companion reembed --dim 384`" in line
