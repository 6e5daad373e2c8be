"""The composition root: settings in, a running engine out, everything closed on exit.

    async with open_app(settings) as app:
        exchange = await app.engine.converse(scope, event)

`open_app` opens the database (and picks the embedder); everything else is built the
first time a command asks for it: `app.engine` imports the turn, the functions' schemas
and the tokenizer (about half a second), `app.metrics` prometheus_client, `app.members`
and the others their services. So `companion link` imports what a sign-in link needs, and
`companion tick` with nothing due never builds the engine. `need_model=False` opens only
the database (for export, import and reset). The model endpoint's client (and the `openai`
package, a second of imports) is made when a command first calls the model: most never do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.database import open_database
from bot.delivery import Router
from bot.settings import Settings
from core.config import EngineConfig
from core.errors import ConfigError
from core.local_embedder import LocalEmbedder
from core.memory.reembed import adopt_dimension, held_model, record_model
from core.multilingual_embedder import MULTILINGUAL, MultilingualEmbedder, package_dir
from core.ports import ChatModel, Completion, Embedder
from core.stopping import stop_within
from core.wire.health import WireHealth

if TYPE_CHECKING:
    import openai

    from bot.metrics import PrometheusMetrics
    from core.members.community import Community
    from core.members.service import Members
    from core.runtime.engine import Engine
    from core.tenants.access import Access
    from core.tenants.tenancy import Tenancy


def utcnow() -> datetime:
    """The engine's default clock (as `core.runtime.engine.utcnow`, without importing it)."""
    return datetime.now(UTC)


class App:
    """What a command works with: the database, settings and embedder from the start; the
    engine and the services each built at their first use (the module docstring says why)."""

    def __init__(
        self,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        embedder: Embedder | None,
        embedding_dim: int,
        endpoint: Endpoint,
        clock: Callable[[], datetime],
        need_model: bool,
        closing: AsyncExitStack,
        hold_catch_up: bool = False,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.embedder = embedder
        self.embedding_dim = embedding_dim  # what the database holds
        self.endpoint = endpoint  # the model endpoint, for other models on it (an eval's judge)
        self.clock = clock
        self.config: EngineConfig = settings.engine_config()
        # The engine's way to members outside a live handler: each platform a command serves
        # adds itself (`companion run`, `companion tick`); none for the rest.
        self.platforms = Router()
        self.wire = WireHealth()
        self._need_model = need_model
        self._hold_catch_up = hold_catch_up  # the embedding worker's first pass waits
        self._closing = closing  # what the engine opens is closed with the app

    @cached_property
    def members(self) -> Members:
        """What members, admins and operators do with memory (audited)."""
        from core.members.service import Members

        return Members(self.sessions, self.config, self.clock, self.embedder)

    @cached_property
    def community(self) -> Community:
        """A tenant at a glance, for its admins."""
        from core.members.community import Community

        return Community(self.sessions, self.config, self.clock, self.settings.welcome)

    @cached_property
    def access(self) -> Access:
        """Sign-in links and sessions of the memory inspector."""
        from core.tenants.access import Access

        settings = self.settings
        return Access(
            self.sessions,
            self.clock,
            settings.base_url,
            settings.secret_key,
            timedelta(minutes=settings.link_minutes),
        )

    @cached_property
    def tenancy(self) -> Tenancy:
        """Communities arriving, leaving, erased."""
        from core.tenants.tenancy import Tenancy

        return Tenancy(self.sessions, self.clock)

    @cached_property
    def metrics(self) -> PrometheusMetrics:
        """What the engine reports, for /metrics."""
        from bot.metrics import PrometheusMetrics

        return PrometheusMetrics(self.sessions, self.wire.outage)

    @cached_property
    def engine(self) -> Engine:
        """The engine: the turn, the tools, the queue manager; with a model, messages get
        vectors in its background (the embedding worker). Closed with the app."""
        from core.memory.embeddings import EmbeddingWorker
        from core.memory.tokens import TokenCounter
        from core.memory.turn import Mind
        from core.memory.window import check_window
        from core.runtime.engine import Engine
        from core.runtime.pictures import Vision

        settings, embedder = self.settings, self.embedder
        if self._need_model:
            check_window(self.config)
        model = LazyChat(self.endpoint, self.wire, settings.model_concurrency)
        mind = Mind(
            model, TokenCounter(), self.config, embedder, metrics=self.metrics, health=self.wire
        )
        worker = EmbeddingWorker(self.sessions, embedder) if embedder and self._need_model else None
        vision = Vision(settings.vision, settings.model or "unset")
        engine = Engine(
            self.sessions, mind, self.clock, worker, vision=vision, platforms=self.platforms
        )
        self._closing.push_async_callback(engine.aclose)
        if worker is not None:
            worker.start(held=self._hold_catch_up)
            self._closing.push_async_exit(worker)
        return engine


class Endpoint:
    """The model endpoint's client, made when first asked for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            from core.openai_package import openai

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
    hold_catch_up: bool = False,
) -> AsyncIterator[App]:
    """The app for one command; `hold_catch_up`: the embedding worker's catch-up (vectors
    that earlier processes left undone) waits for the first turn (`companion chat`)."""
    if need_model:
        settings.require_model()
    async with (
        open_database(
            settings.database_url,
            settings.data_dir,
            settings.embedding_dim,
            schema or settings.db_schema,
            keep_warm,
        ) as (sessions, held_dim),
        Endpoint(settings) as endpoint,
        AsyncExitStack() as closing,
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
        yield App(
            settings,
            sessions,
            embedder,
            held_dim,
            endpoint,
            clock or utcnow,
            need_model,
            closing,
            hold_catch_up,
        )


def _embedder(settings: Settings, endpoint: Endpoint) -> Embedder | None:
    """The endpoint's model when one is named, none for "none", else the local one."""
    name = settings.embedding_model
    if name is None:
        return LocalEmbedder(cache=settings.models_dir)
    if name == "none":
        return None
    if name == MULTILINGUAL:
        package_dir()  # not installed: say so now, not at the first message
        return MultilingualEmbedder()
    return LazyEmbedder(endpoint, name, settings.embedding_dim)


class LazyEmbedder:
    """The endpoint's embedding model (`core.llm.OpenAIEmbedder`), made (with the endpoint's
    client: the `openai` package) at its first call: a command that stores no vector, such
    as `companion usage`, never imports it."""

    def __init__(self, endpoint: Endpoint, model: str, dimension: int) -> None:
        self.endpoint, self.model, self.dimension = endpoint, model, dimension
        self._embedder: Embedder | None = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self._embedder is None:
            from core.llm import OpenAIEmbedder

            self._embedder = OpenAIEmbedder(self.endpoint.client(), self.model, self.dimension)
        return await self._embedder.embed(texts)


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
