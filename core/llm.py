"""OpenAI-compatible implementations of the ports in `core.ports`.

Works with any endpoint that speaks the OpenAI chat-completions and embeddings wire format
(OpenAI, vLLM, Ollama, llama.cpp, LM Studio...). `OpenAIChat` is the one way a request
reaches the model: the wire's rules (core/wire) shape every request, read every answer and
name every failure. The provider's usage comes back with each completion, cached prompt
tokens included. Embeddings keep the `openai` client's own retries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.errors import (
    EmbeddingError,
    ModelError,
    ModelOutputError,
    ModelSetupError,
    ModelTimeout,
    ModelUnavailable,
    WrongDimension,
)
from core.openai_package import openai
from core.ports import Completion, ToolCall
from core.wire.answers import calls_in_text, read_content
from core.wire.health import WireHealth
from core.wire.refusals import Adapt, adaptation, classify
from core.wire.shape import conform, without_calls, without_system

log = logging.getLogger(__name__)
CACHE_KEY = "prompt_cache_key"
MAX_BACKOFF = 8.0  # seconds between retries, unless the server asks for more (Retry-After)
MAX_RETRY_AFTER = 60.0


def _describe(error: Exception) -> str:
    if isinstance(error, openai.APITimeoutError):
        return "the model endpoint timed out"
    if isinstance(error, openai.APIConnectionError):
        return "the model endpoint could not be reached"
    if isinstance(error, openai.RateLimitError):
        return "the model endpoint is rate-limiting us (429)"
    if isinstance(error, openai.APIStatusError):
        return f"the model endpoint answered HTTP {error.status_code}: {error.message[:200]}"
    return f"the model endpoint failed: {type(error).__name__}: {str(error)[:200]}"


def _wait(attempt: int, error: openai.OpenAIError) -> float:
    """Seconds before retry `attempt` (0-based): the server's Retry-After, else backoff."""
    response = getattr(error, "response", None)
    headers = response.headers if response is not None else {}
    for name, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            if headers.get(name) is not None:
                return min(max(float(headers[name]) * unit, 0.0), MAX_RETRY_AFTER)
        except ValueError:
            pass
    return min(0.5 * 2**attempt, MAX_BACKOFF) * random.uniform(0.75, 1.0)


@dataclass(frozen=True)
class Generation:
    """What every chat request asks for besides the prompt: sampling (None: the server's
    default), from COMPANION_TEMPERATURE and COMPANION_TOP_P."""

    temperature: float | None = None
    top_p: float | None = None


class OpenAIChat:
    """Chat completions over the `openai` client: the one way a request reaches the model.

    Every request is put in the wire's one shape first (`core.wire.shape.conform`), so
    whatever the caller built, the strictest server takes it. The messages and function
    schemas reach the client as `extra_body`, which it sends as they are: the same JSON
    bytes as passing them as `messages=` and `tools=`, without the client's type-driven
    transform walking the whole payload on every call.

    Failures (`core.wire.refusals`): a refusal Companion can work around (a parameter the
    server does not take, `max_tokens` on a reasoning model, no system role, a template that
    takes no function messages) changes every later request, logged once; 429, 5xx and lost
    connections are retried `retries` times with backoff (honouring Retry-After), then
    `ModelUnavailable` (not retried once the endpoint is known to be down: the outage's
    probe is one request); a timeout is
    `ModelTimeout` at once (the turn decides whether to wait again: the abandoned
    generation may still be running); the server failing to read the model's output is
    `MalformedOutput`; any other refusal is a `ModelSetupError`, reported to `health`.

    Answers (`core.wire.answers`): reasoning taken out of the content, calls a model wrote
    as text taken as calls where unambiguous, `finish_reason` kept (Ollama's `done_reason`).
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        generation: Generation | None = None,
        health: WireHealth | None = None,
        retries: int = 0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client.with_options(max_retries=0)  # retries are decided here
        self.model = model
        self.generation = generation or Generation()
        self.health = health or WireHealth()
        self.retries = retries
        self.sleep = sleep
        self.adapted: set[Adapt] = set()

    def _request(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        cache_key: str | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the client's parameters, the body it sends as it is) as adapted so far."""
        params: dict[str, Any] = {"model": self.model, "messages": []}
        if Adapt.NO_CALLS in self.adapted:
            messages = without_calls(messages)
        if Adapt.NO_SYSTEM in self.adapted:
            messages = without_system(messages)
        payload: dict[str, Any] = {"messages": messages}
        if max_tokens:
            newer = Adapt.COMPLETION_TOKENS in self.adapted
            params["max_completion_tokens" if newer else "max_tokens"] = max_tokens
        if cache_key and Adapt.NO_CACHE_KEY not in self.adapted:
            params[CACHE_KEY] = cache_key
        if Adapt.NO_SAMPLING not in self.adapted:
            for name in ("temperature", "top_p"):
                value = getattr(self.generation, name)
                if value is not None:
                    params[name] = value
        if tools:
            params["tool_choice"] = "auto"
            payload["tools"] = tools
        return params, payload

    async def _send(self, *request: Any) -> Any:
        attempt = 0
        while True:
            params, payload = self._request(*request)
            try:
                return await self.client.chat.completions.create(**params, extra_body=payload)
            except openai.APITimeoutError as error:
                raise ModelTimeout("the model endpoint did not answer in time") from error
            except (openai.APIConnectionError, openai.APIStatusError) as error:
                status = getattr(error, "status_code", None)
                message = str(getattr(error, "message", "") or error)
                change = adaptation(status, message)
                if change is not None and change not in self.adapted:
                    self.adapted.add(change)
                    log.warning("the model endpoint refuses the %s; not sending it again", change)
                    continue
                failure = classify(status, message, getattr(error, "code", None))
                # Once the endpoint is known to be down (this call is its probe, or another
                # call found it down meanwhile), a retry would only ask a dead endpoint again.
                known_down = self.health.outage.down_since is not None
                if (
                    isinstance(failure, ModelUnavailable)
                    and attempt < self.retries
                    and not known_down
                ):
                    await self.sleep(_wait(attempt, error))
                    attempt += 1
                    continue
                if isinstance(failure, ModelSetupError):
                    self.health.refused(failure)
                raise failure from error

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        outage = self.health.outage
        if not outage.allow():
            raise ModelUnavailable(f"the model endpoint is down ({outage.reason})")
        try:
            response = await self._send(conform(messages).messages, tools, max_tokens, cache_key)
        except (ValueError, RecursionError) as error:  # not JSON, nested too deep, not a reply
            outage.answered()
            raise ModelOutputError(
                f"the model endpoint sent an unreadable answer: {error}"
            ) from error
        except (ModelUnavailable, ModelTimeout) as error:
            outage.failed(error)
            raise
        except ModelError:  # refused for what was asked: the endpoint itself is up
            outage.answered()
            raise
        except BaseException:  # cancelled: neither up nor down
            outage.gave_up()
            raise
        self.health.answered()
        return _read(response, tools)


def _read(response: Any, tools: list[dict[str, Any]] | None) -> Completion:
    """A completion from whatever an OpenAI-compatible server answered."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ModelOutputError("the model answered without a message")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None or isinstance(message, str | list | dict):
        raise ModelOutputError("the model's answer has no message object")
    content = read_content(_text(getattr(message, "content", None)))
    calls = _calls(getattr(message, "tool_calls", None))
    if not calls and tools:
        names = {tool["function"]["name"] for tool in tools}
        content, calls = calls_in_text(content, names)
    finish = getattr(choice, "finish_reason", None) or getattr(choice, "done_reason", None)
    finish = finish or getattr(response, "done_reason", None)
    usage = getattr(response, "usage", None)
    return Completion(
        content=content,
        tool_calls=tuple(calls),
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        cached_tokens=_cached(usage),
        finish_reason=finish if isinstance(finish, str) else None,
    )


def _text(content: Any) -> str | None:
    """Message content as text; a list of parts (some servers send one) is joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text") if isinstance(p, dict) else getattr(p, "text", None) for p in content
        ]
        return "".join(p for p in parts if isinstance(p, str)) or None
    return None


def _calls(raw: Any) -> list[ToolCall]:
    """Tool calls, tolerating what OpenAI-compatible servers really send."""
    calls = []
    for call in raw if isinstance(raw, list) else []:
        function = getattr(call, "function", None)
        if function is None:
            continue
        name, arguments = getattr(function, "name", ""), getattr(function, "arguments", "")
        if isinstance(arguments, dict | list):
            arguments = json.dumps(arguments)  # some servers send the object itself
        call_id = getattr(call, "id", None)
        calls.append(
            ToolCall(
                id=str(call_id) if call_id not in (None, "") else f"call_{uuid.uuid4().hex[:12]}",
                name=name if isinstance(name, str) else str(name or ""),
                arguments=arguments if isinstance(arguments, str) else str(arguments or ""),
            )
        )
    return calls


MAX_REPORTED_TOKENS = 2**31 - 1  # no window is near it; past it a count is garbage (and a
# count past 64 bits would sink the turn's usage row, and the turn with it)


def _count(usage: Any, field: str) -> int | None:
    value = getattr(usage, field, None)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if 0 <= value <= MAX_REPORTED_TOKENS else None


def _cached(usage: Any) -> int | None:
    """Prompt tokens the provider read from its cache: OpenAI's (and vLLM's, llama.cpp's)
    `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`."""
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _count(details, "cached_tokens")
    return cached if cached is not None else _count(usage, "prompt_cache_hit_tokens")


class OpenAIEmbedder:
    """Embeddings over the `openai` client, of exactly `dimension` numbers each.

    The `dimensions` parameter (text-embedding-3 and other Matryoshka models) is sent so a
    model can give a smaller size than its native one; a server that refuses the parameter
    is asked again without it, and not sent it again.
    """

    def __init__(self, client: openai.AsyncOpenAI, model: str, dimension: int) -> None:
        self.client = client
        self.model = model
        self.dimension = dimension
        self.send_dimensions = True

    async def _create(self, texts: list[str]) -> Any:
        if self.send_dimensions:
            try:
                return await self.client.embeddings.create(
                    model=self.model, input=texts, dimensions=self.dimension
                )
            except openai.BadRequestError as error:
                if "dimension" not in str(error.message).lower():
                    raise
                self.send_dimensions = False
        return await self.client.embeddings.create(model=self.model, input=texts)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            response = await self._create(texts)
        except openai.OpenAIError as error:
            raise EmbeddingError(_describe(error).replace("model", "embedding model")) from error
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise EmbeddingError(f"asked for {len(texts)} embeddings, got {len(vectors)}")
        for vector in vectors:
            if len(vector) != self.dimension:
                raise WrongDimension(self.model, len(vector), self.dimension)
        return [_unit(vector) for vector in vectors]


def _unit(vector: list[float]) -> list[float]:
    """The vector scaled to length 1. Searches rank by cosine, which scale does not change,
    and vectors are stored in half precision (up to 65,504): a model giving larger numbers
    would otherwise fail the whole batch it came in, at every pass. A number that is not
    finite is the model's error."""
    if not all(math.isfinite(x) for x in vector):
        raise EmbeddingError("the embedding model returned a number that is not finite")
    length = math.sqrt(math.fsum(x * x for x in vector))
    return [x / length for x in vector] if length else vector
