"""Changing the embedding model: re-embed archival storage, also to a new dimension."""

from datetime import UTC, datetime

from sqlalchemy import text

from core.config import EngineConfig
from core.directory import ensure_agent
from core.members.reembed import reembed, set_dimension
from core.memory.search import archival_search
from core.memory.store import AgentStore
from tests.fake_openai import embed_text


class Embedder:
    def __init__(self, dim):
        self.dim = dim
        self.calls = 0

    async def embed(self, texts):
        self.calls += 1
        return [embed_text(t, self.dim) for t in texts]


async def test_reembed_to_a_new_dimension_keeps_search_working(sessions):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    notes = [f"note {i} about {topic}" for i, topic in enumerate(["tea", "chess", "boats"] * 30)]
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope)
        for note in notes:
            await store.add_passage(note, now, "agent", embed_text(note, 16))
        await store.add_passage("never embedded chess opening", now, "agent", None)
    await set_dimension(sessions, 24)
    embedder = Embedder(24)
    assert await reembed(sessions, embedder, batch=40) == len(notes) + 1
    assert embedder.calls == 3
    async with sessions() as session, session.begin():
        dims = await session.scalar(text("SELECT DISTINCT vector_dims(embedding) FROM passages"))
        held = await session.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        page = await archival_search(session, scope, "chess", embed_text("chess opening", 24))
    assert dims == 24 and held == "24"
    assert page.total == len(notes) + 1
    assert all("chess" in hit.text for hit in page.hits)


async def test_reembed_missing_only_touches_passages_without_vectors(sessions):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope)
        await store.add_passage("has one", now, None, embed_text("has one", 16))
        await store.add_passage("lacks one", now, None, None)
    assert await reembed(sessions, Embedder(16), only_missing=True) == 1
    async with sessions() as session:
        missing = await session.scalar(
            text("SELECT count(*) FROM passages WHERE embedding IS NULL")
        )
    assert missing == 0
