"""The queue manager's decisions, as pure functions of plain values.

`pressure` says whether a prompt is fine, should warn (the warning watermark, once per
episode) or must flush (it would not fit). `evict_until` picks the oldest messages to move
out of the FIFO queue so the prompt drops to the target; an assistant message that calls
functions and the results of those calls leave together, and the protected message (the
newest user message) never leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Protocol, TypeVar


class Queued(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def tool_calls(self) -> object: ...


Q = TypeVar("Q", bound=Queued)


class Pressure(Enum):
    OK = "ok"
    WARN = "warn"
    FLUSH = "flush"


def pressure(tokens: int, warning_tokens: int, budget: int, already_warned: bool) -> Pressure:
    if tokens > budget:
        return Pressure.FLUSH
    if tokens >= warning_tokens and not already_warned:
        return Pressure.WARN
    return Pressure.OK


def units(queue: Sequence[Q]) -> list[list[Q]]:
    """Group the queue so a function call and its results are one unit."""
    grouped: list[list[Q]] = []
    for message in queue:
        if message.role == "tool" and grouped and grouped[-1][0].tool_calls:
            grouped[-1].append(message)
        else:
            grouped.append([message])
    return grouped


def evict_until(
    queue: Sequence[Q], fixed_tokens: int, target_tokens: int, protect: Q | None
) -> list[Q]:
    """The oldest messages to evict so that fixed + remaining queue <= target, if possible."""
    remaining = fixed_tokens + sum(m.tokens for m in queue)
    evicted: list[Q] = []
    for unit in units(queue):
        if remaining <= target_tokens:
            break
        if protect is not None and any(m is protect for m in unit):
            continue
        evicted.extend(unit)
        remaining -= sum(m.tokens for m in unit)
    return evicted
