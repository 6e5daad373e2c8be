"""What the process is working on right now, so that a shutdown knows what to wait for.

    working()       a context around work in progress: a handler storing an event, a turn
    start(work)     work that goes on after its caller returned (a turn after the platform
                    was told "received"), counted until it ends; a failure is logged
    idle()          wait until nothing is in progress
    cancel()        give up the background work still running (its events stay pending
                    in the database and resume on the next start)

The engine owns one (`engine.activity`); adapters wrap their handlers in it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from core.stopping import cancel_within

log = logging.getLogger(__name__)


class Activity:
    def __init__(self) -> None:
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
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

    @staticmethod
    async def _run(work: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await work
        except Exception:
            log.exception("%s failed", name)

    async def idle(self) -> None:
        await self._idle.wait()

    async def cancel(self) -> None:
        """Cancel the background work; each gets STOP_SECONDS to end."""
        await cancel_within("work in progress", list(self._tasks))
