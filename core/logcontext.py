"""The ids of the event being handled, for every log line written while handling it.

The engine sets them (`bind`) around each event; a logging filter (`bot.observability`)
copies them onto records, so JSON logs carry tenant, agent and event ids without every
call passing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CURRENT: ContextVar[dict[str, int] | None] = ContextVar("companion_log_ids", default=None)


def current() -> dict[str, int]:
    return CURRENT.get() or {}


@contextmanager
def bind(**ids: int) -> Iterator[None]:
    token = CURRENT.set({**current(), **ids})
    try:
        yield
    finally:
        CURRENT.reset(token)
