"""The engine's ports to the outside world. Small on purpose.

    ChatModel.complete     one chat completion (core.llm: over the `openai` client)
    Embedder.embed         vectors for texts
    Metrics.count/observe  what the engine reports (bot.observability: Prometheus)
    Platforms              where messages go when no live handler waits for them
    Send                   one reply text, to where it belongs (`Posting`: which outbox reply)
    Progress               (done, total) of a long operator command, for a progress bar
    AdminRights.is_admin   whether a platform user is an admin of a community now

Tests point the `openai` client at a local fake server that speaks the OpenAI wire format.
Metric names are enums, so a name the exporter does not know cannot be written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from core.errors import NoPlatform

Progress = Callable[[int, int], None]  # (done, total) of a long operator command


@dataclass(frozen=True)
class Posting:
    """Which outbox reply a `Send` is sending: `key` names it (the same on every attempt);
    `since`, when set, says an earlier attempt may have posted it (or some of its parts)
    since then, so a platform that can look should post only what it does not find."""

    key: str
    since: datetime | None = None


class Send(Protocol):
    """One text to the member, where it belongs. `posting` is given for a reply from the
    outbox (a notice told at once has none): the platform tags its posts with the key."""

    def __call__(self, text: str, posting: Posting | None = None) -> Awaitable[None]: ...


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model wrote it


@dataclass(frozen=True)
class Completion:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None  # as reported by the provider, when it reports
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt tokens, those served from its cache
    finish_reason: str | None = None  # "stop", "tool_calls", "length" (cut at the limit)...

    @property
    def cut(self) -> bool:
        """The answer stopped at the output limit: a call in it may be incomplete."""
        return self.finish_reason == "length"


class ChatModel(Protocol):
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        """One completion. `cache_key` names the prompt's owner, for providers that route
        requests with the same prefix to the same prompt cache (OpenAI's prompt_cache_key)."""
        ...


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class Counter(StrEnum):
    """Counters the engine increments (labels in brackets)."""

    EVENTS = "events_total"  # [kind, status] one per handled event
    ERRORS = "errors_total"  # [kind: model | internal]
    FLUSHES = "flushes_total"
    WARNINGS = "warnings_total"
    PROMPT_TOKENS = "prompt_tokens_total"
    CACHED_TOKENS = "cached_prompt_tokens_total"  # the part of PROMPT_TOKENS read from cache
    COMPLETION_TOKENS = "completion_tokens_total"
    LIMITED = "limited_total"  # [reason: rate | budget]
    WIRE_REPAIRS = "wire_repairs_total"  # [kind] what shaping a request had to repair
    MODEL_RETRIES = "model_retries_total"  # [reason: timeout | malformed | cut]


class Timer(StrEnum):
    """Durations the engine observes, in seconds."""

    MODEL = "model_seconds"  # one chat-model call
    TURN = "turn_seconds"  # handling one event
    ACK = "acknowledgement_seconds"  # a platform's request, from its arrival to our answer


class Metrics(Protocol):
    def count(self, metric: Counter, amount: float = 1, **labels: str) -> None: ...

    def observe(self, metric: Timer, seconds: float, **labels: str) -> None: ...


class NoMetrics:
    """Metrics that go nowhere: the default."""

    def count(self, metric: Counter, amount: float = 1, **labels: str) -> None:
        pass

    def observe(self, metric: Timer, seconds: float, **labels: str) -> None:
        pass


class AdminRights(Protocol):
    """Whether `user` is, right now, an admin of `tenant` on its platform (bot.rights asks
    the platform); None when this process cannot tell (it does not serve that platform)."""

    async def is_admin(self, tenant: str, user: str) -> bool | None: ...


class Platforms(Protocol):
    """The member's own platform, for messages no live handler is waiting to send.

    The routes raise `core.errors.NoPlatform` for a tenant that no platform served here
    reaches (a key naming no platform, or one this process does not serve): such messages
    wait in the outbox for another process, or for the member's next chat.
    """

    def served(self) -> frozenset[str]:
        """The platforms reached, as tenant keys name them (`core.tenant_key.TenantKey`)."""
        ...

    def reply_route(self, tenant: str, user: str, meta: dict[str, Any]) -> Send:
        """Back where the member wrote (from the event's meta): for retried replies."""
        ...

    def direct(self, tenant: str, user: str) -> Send:
        """A direct message to the member: for openers."""
        ...


class NoPlatforms:
    """`Platforms` that reach none: the default (a front end that shows replies itself)."""

    def served(self) -> frozenset[str]:
        return frozenset()

    def reply_route(self, tenant: str, user: str, meta: dict[str, Any]) -> Send:
        raise NoPlatform(tenant)

    def direct(self, tenant: str, user: str) -> Send:
        raise NoPlatform(tenant)
