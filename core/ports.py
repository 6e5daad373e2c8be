"""The engine's ports to the outside world: a chat model, an embedder, and metrics.

Small on purpose. `core.llm` implements the first two over the `openai` client; tests
point that client at a local fake server that speaks the OpenAI wire format. `Metrics` is
how the engine reports what it does (`bot.observability` exports it to Prometheus):

    count("events_total", kind=..., status=...)      one per handled event
    count("errors_total", kind="model" | "internal")
    count("flushes_total"), count("warnings_total")
    count("prompt_tokens_total", n), count("completion_tokens_total", n)
    count("limited_total", reason="rate" | "budget")
    observe("model_seconds", s), observe("turn_seconds", s)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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


class ChatModel(Protocol):
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> Completion: ...


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class Metrics(Protocol):
    def count(self, name: str, amount: float = 1, **labels: str) -> None: ...

    def observe(self, name: str, value: float, **labels: str) -> None: ...


class NoMetrics:
    """Metrics that go nowhere: the default."""

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        pass

    def observe(self, name: str, value: float, **labels: str) -> None:
        pass
