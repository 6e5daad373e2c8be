"""The composition root: settings in, a running engine out, everything closed on exit.

    async with open_app(settings) as app:
        exchange = await app.engine.converse(scope, event)

`need_model=False` opens only the database (for export, import and reset).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import openai
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.database import open_database
from bot.observability import PrometheusMetrics
from bot.settings import Settings
from core.config import EngineConfig
from core.errors import ConfigError
from core.llm import OpenAIChat, OpenAIEmbedder
from core.members.access import Access
from core.members.community import Community
from core.members.service import Members
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.memory.window import check_window
from core.ports import ChatModel, Embedder
from core.runtime.engine import Engine


@dataclass(frozen=True)
class App:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    engine: Engine
    members: Members  # what members, admins and operators do with memory (audited)
    community: Community  # a tenant at a glance, for its admins
    access: Access  # sign-in links and sessions of the memory inspector
    embedder: Embedder | None
    embedding_dim: int  # what the database holds
    metrics: PrometheusMetrics  # what the engine reports, for /metrics


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
        embedder: Embedder | None = None
        if settings.embedding_model:
            if check_dimension and held_dim != settings.embedding_dim:
                raise ConfigError(
                    f"the database holds {held_dim}-dimension embeddings but "
                    f"COMPANION_EMBEDDING_DIM is {settings.embedding_dim}; run "
                    f"`companion reembed --dim {settings.embedding_dim}`"
                )
            embedder = OpenAIEmbedder(client, settings.embedding_model, settings.embedding_dim)
        model: ChatModel = OpenAIChat(client, settings.model or "unset")
        metrics = PrometheusMetrics(sessions)
        mind = Mind(model, TokenCounter(), config, embedder, metrics=metrics)
        engine = Engine(sessions, mind, clock) if clock else Engine(sessions, mind)
        members = Members(sessions, config, engine.clock, embedder)
        community = Community(sessions, config, engine.clock, settings.welcome)
        access = Access(
            sessions,
            engine.clock,
            settings.base_url,
            settings.secret_key,
            timedelta(minutes=settings.link_minutes),
        )
        yield App(
            settings, sessions, engine, members, community, access, embedder, held_dim, metrics
        )
