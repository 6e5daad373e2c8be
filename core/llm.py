"""OpenAI-compatible implementations of the ports in `core.ports`.

Works with any endpoint that speaks the OpenAI chat-completions and embeddings wire format
(OpenAI, vLLM, Ollama, llama.cpp, LM Studio...). Retries with backoff on 429 and 5xx come
from the `openai` client itself (it honours Retry-After); what still fails becomes a
`ModelError` whose message says what happened, and a prompt the server refuses as longer
than its context window becomes `PromptTooLong` (the turn then flushes and retries). The
provider's usage comes back with each completion, cached prompt tokens included.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from typing import Any

import openai

from core.errors import (
    EmbeddingError,
    ModelError,
    ModelOutputError,
    PromptTooLong,
    WrongDimension,
)
from core.ports import Completion, ToolCall

log = logging.getLogger(__name__)
CACHE_KEY = "prompt_cache_key"

# How servers say a prompt is over their window: OpenAI's error code, else its wording
# (OpenAI, vLLM: "maximum context length"; llama.cpp: "exceeds the available context size";
# LM Studio: "context length"; others: "context window").
TOO_LONG_CODE = "context_length_exceeded"
TOO_LONG_WORDS = re.compile(
    r"context (length|window|size)|maximum context|prompt is too long|too many tokens", re.I
)
# The server's own count of the prompt: "(9000 in the messages" (vLLM, older OpenAI) or
# "your messages resulted in 9876 tokens" (OpenAI).
PROMPT_COUNT = re.compile(r"(\d[\d,]*) in the messages|resulted in (\d[\d,]*) tokens", re.I)


def _too_long(error: openai.OpenAIError) -> PromptTooLong | None:
    """`PromptTooLong` if the server refused the prompt as longer than its window."""
    if not isinstance(error, openai.APIStatusError) or error.status_code not in (400, 413, 422):
        return None
    text = str(error.message)
    if error.code != TOO_LONG_CODE and not TOO_LONG_WORDS.search(text):
        return None
    found = PROMPT_COUNT.search(text)
    count = next((g for g in found.groups() if g), None) if found else None
    return PromptTooLong(
        f"the model endpoint refused the prompt as longer than its context window "
        f"(HTTP {error.status_code}: {text[:200]})",
        int(count.replace(",", "")) if count else None,
    )


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


def _refuses_cache_key(error: openai.OpenAIError) -> bool:
    """Did the server refuse the request because of `prompt_cache_key` (a strict server)?"""
    return (
        isinstance(error, openai.APIStatusError)
        and error.status_code in (400, 422)
        and CACHE_KEY in str(error.message)
    )


class OpenAIChat:
    """Chat completions over the `openai` client.

    The messages and function schemas reach the client as `extra_body`, which it sends as
    they are: the same JSON bytes as passing them as `messages=` and `tools=`, without the
    client's type-driven transform walking the whole payload on every call (a cost that
    grows with the conversation). Everything else is the client's: retries, errors, the
    typed response.

    `cache_key` goes out as `prompt_cache_key` (OpenAI routes requests with the same key
    and prefix to the same prompt cache). A server that refuses the parameter is asked
    again without it, and not sent it again.
    """

    def __init__(self, client: openai.AsyncOpenAI, model: str) -> None:
        self.client = client
        self.model = model
        self.send_cache_key = True

    async def _create(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        cache_key: str | None,
    ) -> Any:
        params: dict[str, Any] = {"model": self.model, "messages": []}
        payload: dict[str, Any] = {"messages": messages}
        if max_tokens:
            params["max_tokens"] = max_tokens
        if cache_key:
            params[CACHE_KEY] = cache_key
        if tools:
            params["tool_choice"] = "auto"
            payload["tools"] = tools
        return await self.client.chat.completions.create(**params, extra_body=payload)

    async def _ask(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        cache_key: str | None,
    ) -> Any:
        if cache_key and self.send_cache_key:
            try:
                return await self._create(messages, tools, max_tokens, cache_key)
            except openai.OpenAIError as error:
                if not _refuses_cache_key(error):
                    raise
                log.warning("the model endpoint refuses %s; not sending it again", CACHE_KEY)
                self.send_cache_key = False
        return await self._create(messages, tools, max_tokens, None)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        try:
            response = await self._ask(messages, tools, max_tokens, cache_key)
        except openai.OpenAIError as error:
            raise (_too_long(error) or ModelError(_describe(error))) from error
        except ValueError as error:  # a body that is not JSON, or not a completion
            raise ModelOutputError(
                f"the model endpoint sent an unreadable answer: {error}"
            ) from error
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise ModelOutputError("the model answered without a message")
        message = getattr(choices[0], "message", None)
        if message is None or isinstance(message, str | list | dict):
            raise ModelOutputError("the model's answer has no message object")
        usage = getattr(response, "usage", None)
        return Completion(
            content=_text(getattr(message, "content", None)),
            tool_calls=tuple(_calls(getattr(message, "tool_calls", None))),
            prompt_tokens=_count(usage, "prompt_tokens"),
            completion_tokens=_count(usage, "completion_tokens"),
            cached_tokens=_cached(usage),
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


def _count(usage: Any, field: str) -> int | None:
    value = getattr(usage, field, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


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
