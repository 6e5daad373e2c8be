"""Changing the embedding model: re-embed archival storage, also to a new dimension.

Nothing is destroyed on a guess: the model is asked first, a new size is filled in beside
the old vectors (which keep serving searches), and the swap happens only when all are ready.
"""

from datetime import UTC, datetime

import openai
import pytest
from sqlalchemy import text

from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError, EmbeddingError
from core.llm import OpenAIEmbedder
from core.memory.reembed import change_dimension, reembed
from core.memory.search import archival_search
from core.memory.store import AgentStore
from tests.conftest import cli_env, run_cli
from tests.fake_openai import embed_text

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NOTES = [f"note {i} about {topic}" for i, topic in enumerate(["tea", "chess", "boats"] * 30)]


class Embedder:
    """Vectors of `dim` numbers; fails on call number `fail_on` (1-based) when set."""

    def __init__(self, dim, fail_on=None):
        self.dim = dim
        self.calls = 0
        self.fail_on = fail_on

    async def embed(self, texts):
        self.calls += 1
        if self.calls == self.fail_on:
            raise EmbeddingError("the embedding endpoint went away")
        return [embed_text(t, self.dim) for t in texts]


async def notes_stored(sessions):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        for note in NOTES:
            await store.add_passage(note, NOW, "agent", embed_text(note, 16))
        await store.add_passage("never embedded chess opening", NOW, "agent", None)
    return scope


async def chess_hits(sessions, scope, dim):
    async with sessions() as session, session.begin():
        page = await archival_search(session, scope, "chess", embed_text("chess opening", dim))
    return page


async def state(sessions):
    async with sessions() as session:
        dims = await session.scalar(
            text("SELECT array_agg(DISTINCT vector_dims(embedding)) FROM passage_vectors")
        )
        held = await session.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
    return dims, held


async def test_a_new_dimension_is_swapped_in_and_search_keeps_working(sessions):
    scope = await notes_stored(sessions)
    embedder = Embedder(24)
    assert await change_dimension(sessions, embedder, 24, batch=40) == len(NOTES) + 1
    assert embedder.calls == 1 + 3  # the check, then three batches
    assert await state(sessions) == ([24], "24")
    page = await chess_hits(sessions, scope, 24)
    assert page.total >= 31  # the 31 chess passages by their words, and the nearest
    assert all("chess" in hit.text for hit in page.hits)


async def test_a_model_of_another_size_changes_nothing(sessions):
    scope = await notes_stored(sessions)
    with pytest.raises(ConfigError, match="returns 32 dimensions, not 24; nothing was changed"):
        await change_dimension(sessions, Embedder(32), 24)
    with pytest.raises(ConfigError, match="returns 24 dimensions, not 16"):
        await reembed(sessions, Embedder(24))
    assert await state(sessions) == ([16, None], "16")
    assert "chess" in (await chess_hits(sessions, scope, 16)).hits[0].text


async def test_an_interrupted_change_keeps_the_old_vectors_and_the_next_run_finishes(sessions):
    scope = await notes_stored(sessions)
    with pytest.raises(EmbeddingError):
        await change_dimension(sessions, Embedder(24, fail_on=3), 24, batch=40)
    assert await state(sessions) == ([16, None], "16")  # still the old size, searchable
    assert "chess" in (await chess_hits(sessions, scope, 16)).hits[0].text
    again = Embedder(24)
    assert await change_dimension(sessions, again, 24, batch=40) == len(NOTES) + 1 - 40
    assert await state(sessions) == ([24], "24")


class Flat(Embedder):
    """Another model: every text the same vector, unlike anything `Embedder` gives."""

    async def embed(self, texts):
        await super().embed(texts)
        return [[1.0] + [0.0] * (self.dim - 1) for _ in texts]


async def test_an_interrupted_change_is_not_continued_by_another_model(sessions):
    # Found: a switch to model A killed halfway left A's vectors in the side column; a switch
    # to model B of the same size then filled only the rest and swapped in a mix of both,
    # recorded as B's.
    await notes_stored(sessions)
    with pytest.raises(EmbeddingError):
        await change_dimension(sessions, Embedder(24, fail_on=3), 24, batch=40, model="a")
    assert await change_dimension(sessions, Flat(24), 24, batch=40, model="b") == len(NOTES) + 1
    async with sessions() as session:
        others = await session.scalar(
            text(
                "SELECT count(*) FROM passage_vectors WHERE vector_dims(embedding) <> 24 "
                "OR embedding <=> CAST(:flat AS halfvec(24)) > 0.001"
            ),
            {"flat": str([1.0] + [0.0] * 23)},
        )
        model = await session.scalar(text("SELECT value FROM meta WHERE key = 'embedding_model'"))
    assert (others, model) == (0, "b")


async def test_reembed_missing_only_touches_passages_without_vectors(sessions):
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, EngineConfig().max_message_tokens)
        await store.add_passage("has one", NOW, None, embed_text("has one", 16))
        await store.add_passage("lacks one", NOW, None, None)
    assert await reembed(sessions, Embedder(16), only_missing=True) == 1
    async with sessions() as session:
        missing = await session.scalar(
            text("SELECT count(*) FROM passage_vectors WHERE embedding IS NULL")
        )
    assert missing == 0


async def test_the_dimensions_parameter_is_sent_and_dropped_where_refused(fake):
    fake.embedding_dim = 1536  # the model's native size
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        embedder = OpenAIEmbedder(client, "text-embedding-3-small", 16)
        assert len((await embedder.embed(["hello"]))[0]) == 16
        assert fake.embedding_requests[-1]["dimensions"] == 16

        fake.accepts_dimensions = False
        fake.embedding_dim = 16
        old = OpenAIEmbedder(client, "an-older-model", 16)
        assert len((await old.embed(["hello"]))[0]) == 16
        assert "dimensions" not in fake.embedding_requests[-1]
        await old.embed(["again"])
        assert "dimensions" not in fake.embedding_requests[-1]  # not tried again


async def test_a_model_giving_numbers_past_half_precision_is_stored_and_searched(fake, sessions):
    """Vectors are stored in half precision (up to 65,504). A model whose vectors are not of
    length 1 gave a batch the database refused at every pass; the embedder scales them to
    length 1 (cosine, by which searches rank, does not change) and refuses what is not a
    number."""
    fake.embedding_scale = 1e6
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        embedder = OpenAIEmbedder(client, "a-model-of-large-numbers", 16)
        async with sessions() as session, session.begin():
            scope = await ensure_agent(session, "t", "u", EngineConfig())
            store = AgentStore(session, scope, EngineConfig().max_message_tokens)
            for note in NOTES[:3]:
                await store.add_passage(note, NOW, "agent", None)
        assert await reembed(sessions, embedder, only_missing=True) == 3
        async with sessions() as session, session.begin():
            query = (await embedder.embed(["chess"]))[0]
            page = await archival_search(session, scope, "", query)
        assert page.hits[0].text == NOTES[1]  # "note 1 about chess"

        fake.embedding_scale = float("nan")
        with pytest.raises(EmbeddingError, match="not finite"):
            await embedder.embed(["chess"])


async def test_the_command_refuses_a_mismatch_in_one_line_and_changes_nothing(
    fake, pg_url, schema, sessions
):
    await notes_stored(sessions)
    fake.accepts_dimensions = False  # a model that can only give 16
    env = cli_env(fake, pg_url, schema, COMPANION_EMBEDDING_MODEL="fake-embed")
    wrong = await run_cli({**env, "COMPANION_EMBEDDING_DIM": "24"}, "reembed", "--dim", "24")
    assert wrong.code == 2 and "Traceback" not in wrong.err
    assert wrong.err.strip().splitlines() == [
        "companion: the embedding model returns 16 dimensions, not 24; nothing was changed. "
        "Set COMPANION_EMBEDDING_DIM=16 (and run `companion reembed --dim 16`), or choose a "
        "model that gives the size you want"
    ]
    plain = await run_cli({**env, "COMPANION_EMBEDDING_DIM": "24"}, "reembed")
    assert plain.code == 2 and "run `companion reembed --dim 24`" in plain.err
    assert "Traceback" not in plain.err
    assert await state(sessions) == ([16, None], "16")
    done = await run_cli(env, "reembed", "--missing")
    assert done.code == 0 and done.err.strip().endswith("re-embedded 1 passages and messages")
