"""Bounded stops: what a process closes on its way out gets a few seconds, no more.

    await stop_within(what, closing, seconds)    await `closing` (a worker's stop, a
                                                 connection's close); past `seconds` it is
                                                 cancelled, a warning names `what`, and the
                                                 exit goes on without it
    await cancel_within(what, tasks, seconds)    cancel tasks and wait for them so long; one
                                                 that will not end is left behind, named

A connection to a database that stopped answering, a client whose socket hangs, a worker
that swallows its cancellation: none of them keeps a process from exiting. (Seen: a
`companion chat` printed its replies and never exited, its embedding worker waiting.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable

log = logging.getLogger(__name__)

STOP_SECONDS = 5.0  # per worker or connection, at exit


async def stop_within(what: str, closing: Awaitable[object], seconds: float | None = None) -> bool:
    """Await `closing` for at most `seconds` (STOP_SECONDS, read at the call); False
    (logged) when it did not finish. Its own errors are logged too: a failing close must
    not stop the rest of the exit."""
    seconds = STOP_SECONDS if seconds is None else seconds
    task = asyncio.ensure_future(closing)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        log.warning("%s did not stop within %g s; going on without it", what, seconds)
        return False
    if not task.cancelled() and task.exception() is not None:
        log.warning("%s failed while stopping: %s", what, task.exception())
    return True


async def cancel_within(
    what: str, tasks: Iterable[asyncio.Task[object]], seconds: float | None = None
) -> bool:
    """Cancel `tasks` and wait for them at most `seconds` (STOP_SECONDS, read at the call);
    False (logged) if some still run."""
    seconds = STOP_SECONDS if seconds is None else seconds
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if not running:
        return True
    _, pending = await asyncio.wait(running, timeout=seconds)
    if pending:
        names = ", ".join(sorted(task.get_name() for task in pending))
        log.warning("%s: %s still running %g s after cancel; left behind", what, names, seconds)
        return False
    return True
