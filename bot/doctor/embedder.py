"""The local embedding model's check: it loads from the installed wheels and gives vectors.

Apart from the model checks, which import `openai` (most of a second): this one starts
loading the model meanwhile.
"""

from __future__ import annotations

from bot.doctor.results import Result, fail, ok
from bot.settings import Settings
from core.errors import EmbeddingError
from core.local_embedder import LocalEmbedder
from core.multilingual_embedder import MultilingualEmbedder


async def check_local_embedder(settings: Settings) -> list[Result]:
    """The built-in model loads from the installed wheels (only when it is the embedder)."""
    if settings.embedding_model == "none":
        return [ok("embeddings: none (COMPANION_EMBEDDING_MODEL=none): key words only")]
    if not settings.embeds_in_process:
        return [ok("local embedding model: not used (COMPANION_EMBEDDING_MODEL is set)")]
    try:
        embedder = (
            MultilingualEmbedder()
            if settings.embedding_model
            else LocalEmbedder(cache=settings.models_dir)
        )
        size = len((await embedder.embed(["ok"]))[0])
    except EmbeddingError as error:
        return [fail(f"local embedding model: {error}")]
    return [ok(f"local embedding model: {settings.embedder_name} gives {size} dimensions")]
