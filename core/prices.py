"""What model tokens cost: a price table the operator can amend, in US dollars per million.

A price has three parts, as providers bill: input read fresh, input served from the
provider's prompt cache (billed lower), and output; `Spent` is tokens split the same way.
`DEFAULT_PRICES` holds list prices of common models as published in 2025; `parse_prices`
reads the operator's own entries (`COMPANION_PRICES`), which win over the defaults. A model
with no price has no cost: reports show it as unknown, and money budgets refuse to start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from core.errors import ConfigError

PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    cached_input: float
    output: float

    def cost(self, uncached: int, cached: int, output: int) -> float:
        """Dollars for that many uncached input, cached input and output tokens."""
        return (uncached * self.input + cached * self.cached_input + output * self.output) / PER


@dataclass(frozen=True)
class Spent:
    """Tokens spent, split as providers bill them."""

    tokens: int = 0  # prompt + completion
    cached: int = 0  # prompt tokens served from the provider's cache
    completion: int = 0

    @property
    def uncached(self) -> int:
        """Prompt tokens read fresh."""
        return self.tokens - self.cached - self.completion

    def cost(self, price: Price) -> float:
        return price.cost(self.uncached, self.cached, self.completion)


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "o3": Price(2.00, 0.50, 8.00),
    "o3-mini": Price(1.10, 0.55, 4.40),
    "o4-mini": Price(1.10, 0.275, 4.40),
    "gpt-4-turbo": Price(10.00, 10.00, 30.00),
    "gpt-3.5-turbo": Price(0.50, 0.50, 1.50),
    "claude-sonnet-4": Price(3.00, 0.30, 15.00),
    "claude-3-5-haiku": Price(0.80, 0.08, 4.00),
    "gemini-2.5-pro": Price(1.25, 0.31, 10.00),
    "gemini-2.5-flash": Price(0.30, 0.075, 2.50),
    "deepseek-chat": Price(0.27, 0.07, 1.10),
}

_ENTRY = re.compile(r"^\s*([^=\s]+)\s*=\s*([0-9.]+)\s*/\s*([0-9.]+)\s*/\s*([0-9.]+)\s*$")


def parse_prices(raw: str) -> dict[str, Price]:
    """'my-model=0.5/0.1/2, other=0/0/0' -> {name: Price}: input/cached input/output."""
    table: dict[str, Price] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        found = _ENTRY.match(part)
        try:
            if found is None:
                raise ValueError
            name, *numbers = found.groups()
            table[name.lower()] = Price(*(float(n) for n in numbers))
        except ValueError:
            raise ConfigError(
                "COMPANION_PRICES entries look like model=input/cached/output in dollars per "
                f"million tokens, e.g. gpt-4o-mini=0.15/0.075/0.60; got {part.strip()!r}"
            ) from None
    return table


def price_for(model: str, table: Mapping[str, Price] | None = None) -> Price | None:
    """The price of `model` (the operator's table first); tolerates provider prefixes,
    tags and dated versions ("openai/gpt-4o-mini-2024-07-18" is gpt-4o-mini)."""
    prices = {**DEFAULT_PRICES, **(table or {})}
    name = model.rsplit("/", 1)[-1].lower()
    for candidate in (name, name.split(":", 1)[0]):
        if candidate in prices:
            return prices[candidate]
    best = max((k for k in prices if name.startswith(k + "-")), key=len, default=None)
    return prices[best] if best else None
