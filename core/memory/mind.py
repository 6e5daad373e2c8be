"""What a turn works with besides the agent's own memory, and what comes of it.

Mind           the model, the token counter, the config and the process's helpers
MeteredModel   the model as a turn uses it: each call timed, counted, charged to the
               turn's `TurnResult`, and made inside the turn's `Pause`
TurnResult     one event's outcome: replies, steps, tokens and every call's usage
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.config import EngineConfig
from core.memory.contexts import ContextCache
from core.memory.executor import Outcome
from core.memory.tokens import TokenCounter
from core.memory.window import tools_tokens
from core.ports import ChatModel, Completion, Counter, Embedder, Metrics, NoMetrics, Timer
from core.wire.health import WireHealth

# What a member hears while their message waits for a model that is down (once per outage).
# It is stored as a reply to the message, but it is the engine's, not the turn's: a turn that
# goes on once the model is back does not count it as something it said.
WAITING_NOTICE = (
    "I can't reach the model I think with right now. I have your message and will answer "
    "as soon as it is back."
)


@dataclass(frozen=True)
class Step:
    thought: str | None
    outcomes: tuple[Outcome, ...]
    prompt_tokens: int


class CallPurpose(StrEnum):
    """What a model call is for."""

    CHAT = "chat"  # a step of the turn, with the functions
    SUMMARY = "summary"  # the recursive summary of evicted messages
    PICTURE = "picture"  # what a shared picture shows (core.runtime.pictures)


@dataclass(frozen=True)
class CallUsage:
    """What one model call cost, as the provider reported it (else our estimate)."""

    purpose: CallPurpose
    prompt_tokens: int
    cached_tokens: int  # of prompt_tokens, read from the provider's prompt cache
    completion_tokens: int


@dataclass
class TurnResult:
    event_id: int
    replies: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    warnings: int = 0
    flushes: int = 0
    tokens: int = 0  # prompt + completion tokens of every model call, summaries included
    model_calls: int = 0  # answered model calls, summaries included
    error: str | None = None
    calls: list[CallUsage] = field(default_factory=list)  # every answered call, in order
    deferred: bool = False  # the model is down: the event waits, pending, for it
    # How many of `calls` a commit has recorded in the agent's usage; the rest were billed
    # but a failed transaction may have lost them (the engine records them on their own).
    recorded: int = 0

    @property
    def cached_tokens(self) -> int:
        return sum(call.cached_tokens for call in self.calls)

    @property
    def completion_tokens(self) -> int:
        return sum(call.completion_tokens for call in self.calls)


@dataclass
class Mind:
    """What a turn needs besides the agent's own memory."""

    model: ChatModel
    counter: TokenCounter
    config: EngineConfig
    embedder: Embedder | None = None
    metrics: Metrics = field(default_factory=NoMetrics)
    # Agents' main contexts kept between turns in this process.
    contexts: ContextCache = field(default_factory=ContextCache)
    # What the process learns about the endpoint (shared with the chat model), for operators.
    health: WireHealth = field(default_factory=WireHealth)


# What a turn does around each model call (`Turn(pause=...)`): the engine commits the turn's
# transaction, so no connection waits on the model, and locks the agent again after it.
Pause = Callable[[], AbstractAsyncContextManager[None]]


@dataclass
class MeteredModel:
    """The chat model as a turn uses it: each call timed, calibrating the counter and
    charged to `result` and the metrics, whoever makes it (the turn or the summarizer),
    and made inside `around` (the turn's pause)."""

    mind: Mind
    result: TurnResult
    around: Pause = nullcontext

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
        estimate: int | None = None,
    ) -> Completion:
        """`estimate`: our raw count of the prompt when the caller has it (else counted)."""
        counter, metrics = self.mind.counter, self.mind.metrics
        raw = estimate if estimate is not None else counter.count_prompt(messages, tools)
        async with self.around():
            started = time.perf_counter()
            completion = await self.mind.model.complete(messages, tools, max_tokens, cache_key)
            metrics.observe(Timer.MODEL, time.perf_counter() - started)
            # Charged before `around` ends: the call is billed even if the turn cannot go on
            # after it (the database went away while the model thought).
            self._charge(completion, raw, tools)
        return completion

    def _charge(self, completion: Completion, raw: int, tools: list[dict[str, Any]] | None) -> None:
        """The call's tokens: to the counter's calibration, the metrics and `result`."""
        counter, metrics = self.mind.counter, self.mind.metrics
        if tools:
            self.mind.health.saw_prompt(raw, tools_tokens(), completion.prompt_tokens)
        counter.calibrate(raw, completion.prompt_tokens)
        prompt_tokens = completion.prompt_tokens or counter.scale(raw)
        cached_tokens = min(completion.cached_tokens or 0, prompt_tokens)
        completion_tokens = completion.completion_tokens or 0
        metrics.count(Counter.PROMPT_TOKENS, prompt_tokens)
        metrics.count(Counter.CACHED_TOKENS, cached_tokens)
        metrics.count(Counter.COMPLETION_TOKENS, completion_tokens)
        purpose = CallPurpose.CHAT if tools else CallPurpose.SUMMARY
        usage = CallUsage(purpose, prompt_tokens, cached_tokens, completion_tokens)
        self.result.calls.append(usage)
        self.result.tokens += prompt_tokens + completion_tokens
        self.result.model_calls += 1
