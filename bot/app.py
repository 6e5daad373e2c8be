"""The composition root: settings in, a running engine out, everything closed on exit.

    async with open_app(settings) as app:
        exchange = await app.engine.converse(scope, event)

`need_model=False` opens only the database (for export, import and reset).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta

import openai
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.database import open_database
from bot.observability import PrometheusMetrics
from bot.settings import Settings
from core.config import EngineConfig
from core.errors import ConfigError
from core.llm import Bounded, Generation, OpenAIChat, OpenAIEmbedder
from core.local_embedder import LocalEmbedder
from core.members.access import Access
from core.members.community import Community
from core.members.reembed import adopt_dimension
from core.members.service import Members
from core.members.tenancy import Tenancy
from core.memory.embeddings import EmbeddingWorker
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.memory.window import check_window
from core.ports import ChatModel, Embedder
from core.runtime.engine import Engine, utcnow
from core.runtime.pictures import Vision
from core.wire.health import WireHealth


@dataclass(frozen=True)
class App:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    engine: Engine
    members: Members  # what members, admins and operators do with memory (audited)
    community: Community  # a tenant at a glance, for its admins
    access: Access  # sign-in links and sessions of the memory inspector
    tenancy: Tenancy  # communities arriving, leaving, erased
    embedder: Embedder | None
    embedding_dim: int  # what the database holds
    metrics: PrometheusMetrics  # what the engine reports, for /metrics
    client: openai.AsyncOpenAI  # the endpoint, for other models on it (an eval's judge)


def _client(settings: Settings) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key or "not-needed",
        timeout=settings.model_timeout,
        max_retries=settings.model_retries,
    )


@asynccontextmanager
async def open_app(
    settings: Settings,
    need_model: bool = True,
    schema: str | None = None,
    check_dimension: bool = True,
    clock: Callable[[], datetime] | None = None,
) -> AsyncIterator[App]:
    config: EngineConfig = settings.engine_config()
    if need_model:
        settings.require_model()
        check_window(config)
    async with (
        open_database(
            settings.database_url,
            settings.data_dir,
            settings.embedding_dim,
            schema or settings.db_schema,
        ) as (sessions, held_dim),
        _client(settings) as client,
    ):
        embedder = _embedder(settings, client)
        if embedder is not None and check_dimension and held_dim != settings.embedding_dim:
            if await adopt_dimension(sessions, settings.embedding_dim):
                held_dim = settings.embedding_dim  # no vector was stored: nothing to redo
            elif need_model:
                raise _mismatch(settings, held_dim)
            else:
                embedder = None  # export, import, reset: rows get vectors from a later pass
        wire = WireHealth()
        generation = Generation(settings.temperature, settings.top_p)
        model: ChatModel = Bounded(
            OpenAIChat(
                client,
                settings.model or "unset",
                generation=generation,
                health=wire,
                retries=settings.model_retries,
            ),
            settings.model_concurrency,
        )
        metrics = PrometheusMetrics(sessions, wire.outage)

        mind = Mind(model, TokenCounter(), config, embedder, metrics=metrics, health=wire)
        # Messages get vectors in the background of the processes that hold conversations.
        worker = EmbeddingWorker(sessions, embedder) if embedder and need_model else None
        vision = Vision(settings.vision, settings.model or "unset")
        engine = Engine(sessions, mind, clock or utcnow, worker, vision=vision)
        members = Members(sessions, config, engine.clock, embedder)
        community = Community(sessions, config, engine.clock, settings.welcome)
        access = Access(
            sessions,
            engine.clock,
            settings.base_url,
            settings.secret_key,
            timedelta(minutes=settings.link_minutes),
        )
        async with aclosing(engine), worker or nullcontext():
            yield App(
                settings,
                sessions,
                engine,
                members,
                community,
                access,
                Tenancy(sessions, engine.clock),
                embedder,
                held_dim,
                metrics,
                client,
            )


def _embedder(settings: Settings, client: openai.AsyncOpenAI) -> Embedder | None:
    """The endpoint's model when one is named, none for "none", else the local one."""
    name = settings.embedding_model
    if name is None:
        return LocalEmbedder()
    if name.lower() == "none":
        return None
    return OpenAIEmbedder(client, name, settings.embedding_dim)


def _mismatch(settings: Settings, held: int) -> ConfigError:
    """What to run when the database's vectors are of another size than the embedder's."""
    wanted = settings.embedding_dim
    if settings.embedding_model is None:
        return ConfigError(
            f"the database holds {held}-dimension embeddings and the local embedding model "
            f"gives {wanted}: run `companion reembed --dim {wanted}` to re-embed with it, or "
            f"set COMPANION_EMBEDDING_MODEL (and COMPANION_EMBEDDING_DIM={held}) to keep the "
            "model that made them"
        )
    return ConfigError(
        f"the database holds {held}-dimension embeddings but COMPANION_EMBEDDING_DIM is "
        f"{wanted}; run `companion reembed --dim {wanted}`"
    )
