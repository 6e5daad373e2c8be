"""The composition root: settings in, a running engine out, everything closed on exit.

    async with open_app(settings) as app:
        exchange = await app.engine.converse(scope, event)

`need_model=False` opens only the database (for export, import and reset). The model
endpoint's client (and the `openai` package, a second of imports) is made when a command
first calls the model: most never do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.database import open_database
from bot.delivery import Router
from bot.metrics import PrometheusMetrics
from bot.settings import Settings
from core.config import EngineConfig
from core.errors import ConfigError
from core.local_embedder import LocalEmbedder
from core.members.community import Community
from core.members.service import Members
from core.memory.embeddings import EmbeddingWorker
from core.memory.reembed import adopt_dimension, held_model, record_model
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.memory.window import check_window
from core.multilingual_embedder import MULTILINGUAL, MultilingualEmbedder, package_dir
from core.ports import ChatModel, Completion, Embedder
from core.runtime.engine import Engine, utcnow
from core.runtime.pictures import Vision
from core.stopping import stop_within
from core.tenants.access import Access
from core.tenants.tenancy import Tenancy
from core.wire.health import WireHealth

if TYPE_CHECKING:
    import openai


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
    endpoint: Endpoint  # the model endpoint, for other models on it (an eval's judge)
    # The engine's way to members outside a live handler: each platform a command serves
    # adds itself (`companion run`, `companion tick`); none for the rest.
    platforms: Router


class Endpoint:
    """The model endpoint's client, made when first asked for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.settings.openai_base_url,
                api_key=self.settings.openai_api_key or "not-needed",
                timeout=self.settings.model_timeout,
                max_retries=self.settings.model_retries,
            )
        return self._client

    async def __aenter__(self) -> Endpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await stop_within("the model endpoint's client", self._client.close())


class LazyChat:
    """The `ChatModel` of the settings, built (with the endpoint's client) at its first call,
    with at most `slots` calls in flight."""

    def __init__(self, endpoint: Endpoint, health: WireHealth, slots: int) -> None:
        self.endpoint, self.health = endpoint, health
        self._model: ChatModel | None = None
        # At most `slots` calls in flight in this process (COMPANION_MODEL_CONCURRENCY):
        # what bounds how many members are answered at once is the model endpoint, never
        # the database pool (no turn holds a connection while it waits).
        self._slots = asyncio.Semaphore(max(1, slots))

    def model(self) -> ChatModel:
        if self._model is None:
            from core.llm import Generation, OpenAIChat

            settings = self.endpoint.settings
            self._model = OpenAIChat(
                self.endpoint.client(),
                settings.model or "unset",
                generation=Generation(settings.temperature, settings.top_p),
                health=self.health,
                retries=settings.model_retries,
            )
        return self._model

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        async with self._slots:
            return await self.model().complete(messages, tools, max_tokens, cache_key)


@asynccontextmanager
async def open_app(
    settings: Settings,
    need_model: bool = True,
    schema: str | None = None,
    check_dimension: bool = True,
    clock: Callable[[], datetime] | None = None,
    keep_warm: bool = False,
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
            keep_warm,
        ) as (sessions, held_dim),
        Endpoint(settings) as endpoint,
    ):
        embedder = _embedder(settings, endpoint)
        if embedder is not None and check_dimension and held_dim != settings.embedding_dim:
            if await adopt_dimension(sessions, settings.embedding_dim):
                held_dim = settings.embedding_dim  # no vector was stored: nothing to redo
            elif need_model:
                raise _mismatch(settings, held_dim)
            else:
                embedder = None  # export, import, reset: rows get vectors from a later pass
        if embedder is not None and check_dimension:
            made_by = await held_model(sessions)
            if made_by is None:  # a database from before models were recorded: its own
                await record_model(sessions, settings.embedder_name)
            elif made_by != settings.embedder_name:
                if need_model:
                    raise _switched(settings, made_by)
                embedder = None  # as above
        wire = WireHealth()
        model = LazyChat(endpoint, wire, settings.model_concurrency)
        metrics = PrometheusMetrics(sessions, wire.outage)
        mind = Mind(model, TokenCounter(), config, embedder, metrics=metrics, health=wire)
        # Messages get vectors in the background of the processes that hold conversations.
        worker = EmbeddingWorker(sessions, embedder) if embedder and need_model else None
        vision = Vision(settings.vision, settings.model or "unset")
        platforms = Router()
        engine = Engine(sessions, mind, clock or utcnow, worker, vision=vision, platforms=platforms)
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
                endpoint,
                platforms,
            )


def _embedder(settings: Settings, endpoint: Endpoint) -> Embedder | None:
    """The endpoint's model when one is named, none for "none", else the local one."""
    name = settings.embedding_model
    if name is None:
        return LocalEmbedder()
    if name == "none":
        return None
    if name == MULTILINGUAL:
        package_dir()  # not installed: say so now, not at the first message
        return MultilingualEmbedder()
    from core.llm import OpenAIEmbedder

    return OpenAIEmbedder(endpoint.client(), name, settings.embedding_dim)


def _switched(settings: Settings, made_by: str) -> ConfigError:
    """What to run when the stored vectors were made by another model (of the same size)."""
    return ConfigError(
        f"the stored embeddings were made by {made_by} and COMPANION_EMBEDDING_MODEL now "
        f"gives {settings.embedder_name}: run `companion reembed` to re-embed with it (searches "
        "use the old vectors until it is done), or set COMPANION_EMBEDDING_MODEL back"
    )


def _mismatch(settings: Settings, held: int) -> ConfigError:
    """What to run when the database's vectors are of another size than the embedder's."""
    wanted = settings.embedding_dim
    if settings.embeds_in_process:
        return ConfigError(
            f"the database holds {held}-dimension embeddings and {settings.embedder_said} "
            f"gives {wanted}: run `companion reembed --dim {wanted}` to re-embed with it, or "
            f"set COMPANION_EMBEDDING_MODEL (and COMPANION_EMBEDDING_DIM={held}) to keep the "
            "model that made them"
        )
    return ConfigError(
        f"the database holds {held}-dimension embeddings but COMPANION_EMBEDDING_DIM is "
        f"{wanted}; run `companion reembed --dim {wanted}`"
    )
