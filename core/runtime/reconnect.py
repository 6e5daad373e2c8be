"""A database that goes away for a while (a restart, a failover) is waited for, not failed on.

    unreachable(error)           whether an error says the database could not be reached:
                                 no server (refused, no socket), a connection it closed or
                                 reset, a server starting up or shutting down
    await when_back(work, what)  `work()`, tried again while the database is unreachable,
                                 for at most DATABASE_WAIT seconds; then, or for any other
                                 error at once, its error is raised (`on_wait`: called
                                 once the waiting begins)
    await keep_usage(...)        a turn's model calls that no commit recorded (the database
                                 went away under it): recorded on their own once it is back

Work handed to `when_back` must be safe to repeat: a failed transaction rolled back, and a
message stored again is deduplicated by its key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import date
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.memory.mind import TurnResult
from core.memory.store import AgentStore
from core.scope import Scope, enter_scope

log = logging.getLogger(__name__)

DATABASE_WAIT = 300.0  # seconds: a managed server's restart or failover takes one or two minutes
# SQLSTATEs of a server that is going away or not there yet, beside class 08 (connections):
# admin shutdown, crash shutdown, cannot connect now (starting up, recovering)
_GOING = ("57P01", "57P02", "57P03")
DRIVERS = ("asyncpg", "sqlalchemy")  # modules whose OS errors are the database's

T = TypeVar("T")


def _gone(state: object) -> bool:
    return isinstance(state, str) and (state.startswith("08") or state in _GOING)


def _in_driver(error: BaseException) -> bool:
    """Was it raised by the database's driver (not, say, a platform's HTTP client)?"""
    trace = error.__traceback__
    while trace is not None:
        if str(trace.tb_frame.f_globals.get("__name__", "")).startswith(DRIVERS):
            return True
        trace = trace.tb_next
    return False


def unreachable(error: BaseException) -> bool:
    """Is this the database out of reach (as opposed to a statement it refused, or another
    server that failed)?"""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and _in_driver(cause):  # refused, no socket, reset
            return True
        if isinstance(cause, DBAPIError):
            if cause.connection_invalidated or _gone(getattr(cause.orig, "sqlstate", None)):
                return True
            cause = cause.orig
            continue
        if _gone(getattr(cause, "sqlstate", None)):  # the driver's own
            return True
        cause = cause.__cause__
    return False


async def when_back(
    work: Callable[[], Awaitable[T]],
    what: str,
    seconds: float = DATABASE_WAIT,
    on_wait: Callable[[], None] | None = None,
) -> T:
    """`work()`; while the database is unreachable, again (0.1 s, then up to 2 s apart).
    `on_wait` runs once, when the waiting begins."""
    deadline, wait, told = time.monotonic() + seconds, 0.1, False
    while True:
        try:
            return await work()
        except Exception as error:
            if not unreachable(error) or time.monotonic() + wait > deadline:
                raise
            if not told:
                log.warning("%s waits for the database: %s", what, error)
                told = True
                if on_wait is not None:
                    on_wait()
        await asyncio.sleep(wait)
        wait = min(wait * 2, 2.0)


async def keep_usage(
    sessions: async_sessionmaker[AsyncSession],
    scope: Scope,
    spent: TurnResult,
    day: date,
    max_message_tokens: int,
    seconds: float = DATABASE_WAIT,
) -> None:
    """Record the calls of `spent` that no commit recorded: the model billed them whatever
    became of the turn (the turn runs again and its new calls are billed too). Given up,
    logged with the tokens, if the database stays away longer than `seconds`."""
    calls = spent.calls[spent.recorded :]
    if not calls:
        return
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in calls)

    async def record() -> None:
        async with sessions() as session, session.begin():
            await enter_scope(session, scope)
            await AgentStore(session, scope, max_message_tokens).add_usage(
                day,
                tokens,
                len(calls),
                sum(c.cached_tokens for c in calls),
                sum(c.completion_tokens for c in calls),
            )

    try:
        await when_back(record, f"the usage of agent {scope.agent_id}'s cut turn", seconds)
    except Exception:
        log.exception(
            "agent %s: the usage of %d model calls (%d tokens) was not recorded",
            scope.agent_id,
            len(calls),
            tokens,
        )
        return
    spent.recorded = len(spent.calls)
