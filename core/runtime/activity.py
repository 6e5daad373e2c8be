"""What the process is working on right now, so that a shutdown knows what to wait for.

    working()       a context around work in progress: a handler storing an event, a turn
    receiving()     working() for a request whose platform waits for our acknowledgement
                    (Slack resends what is not acknowledged within 3 s)
    start(work)     work that goes on after its caller returned (a turn after the platform
                    was told "received"), counted until it ends; a failure is logged
    quiet()         wait while requests are being received (at most `QUIET_LIMIT`)
    idle()          wait until nothing is in progress
    cancel()        give up the background work still running (its events stay pending
                    in the database and resume on the next start)

The engine owns one (`engine.activity`); adapters wrap their handlers in it.

Acknowledgements come first: when many members write at once, the work after earlier
acknowledgements (turns, deliveries) waits at its next step (`quiet`) while requests are
stored and acknowledged, so one process's CPU goes to the acknowledgements first, not
shared with hundreds of turns. It waits at most `QUIET_LIMIT` seconds at a time: requests
that never stop coming slow the answers down, they never stop them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any

from core.stopping import cancel_within

log = logging.getLogger(__name__)
QUIET_LIMIT = 2.0  # seconds background work gives way to requests at one step, at most


class Activity:
    def __init__(self, quiet_limit: float = QUIET_LIMIT) -> None:
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._receiving = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self.quiet_limit = quiet_limit
        self.giving_way = 0  # tasks waiting in `quiet` now
        self._tasks: set[asyncio.Task[None]] = set()

    def _enter(self) -> None:
        self._busy += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._busy -= 1
        if not self._busy:
            self._idle.set()

    @asynccontextmanager
    async def working(self) -> AsyncIterator[None]:
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @asynccontextmanager
    async def receiving(self) -> AsyncIterator[None]:
        self._receiving += 1
        self._quiet.clear()
        try:
            async with self.working():
                yield
        finally:
            self._receiving -= 1
            if not self._receiving:
                self._quiet.set()

    async def quiet(self) -> None:
        """Return once no request waits for its acknowledgement, or after `quiet_limit`."""
        if self._quiet.is_set():
            return
        self.giving_way += 1
        try:
            with suppress(TimeoutError):
                async with asyncio.timeout(self.quiet_limit):
                    await self._quiet.wait()
        finally:
            self.giving_way -= 1

    def start(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[None]:
        """Run `work` as a task; counted from now (not from when the task first runs)."""
        self._enter()
        task = asyncio.create_task(self._run(work, name), name=f"companion: {name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)  # also when cancelled before it ever ran
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._leave()

    async def _run(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await self.quiet()  # what a platform waits for goes first
        except BaseException:
            work.close()  # cancelled before it began
            raise
        try:
            await work
        except Exception:
            log.exception("%s failed", name)

    async def idle(self) -> None:
        await self._idle.wait()

    async def cancel(self) -> None:
        """Cancel the background work; each gets STOP_SECONDS to end."""
        await cancel_within("work in progress", list(self._tasks))
