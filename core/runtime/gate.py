"""One drain of an agent at a time in this process, before anything else is taken; and a
share of the pool for turns' transactions.

    gate.turn(agent_id)   wait for this process's drain of that agent to end
    gate.slot()           a `Slot`: taken while a turn's transaction holds a connection,
                          given back while the model thinks (`Checkpoint`)

Handlers of a busy agent (a member who writes several messages at once) wait here, holding
nothing: no connection, no claim. Across processes the agent's claim (core.runtime.presence)
keeps its turns one at a time; this keeps a process from asking for its own claim twice.

Turns' transactions take at most `slots` connections at once (half the pool in `companion
run`): however many members are answered at once, storing a new event (what a platform's
acknowledgement waits for), deliveries and /readyz always find a connection. Before each of
its transactions a turn also gives way to requests waiting for their acknowledgement
(`yield_to`: the engine's `Activity.quiet`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

YieldTo = Callable[[], Awaitable[None]]  # what a turn waits for before each transaction


class Slot:
    """One turn's share of the pool: `take` before its transaction, `give` after (each
    does nothing when already done, so a cancelled wait never gives back what it never
    took)."""

    def __init__(self, slots: asyncio.Semaphore, yield_to: YieldTo | None = None) -> None:
        self._slots, self.held = slots, False
        self._yield_to = yield_to

    async def take(self) -> None:
        if not self.held:
            if self._yield_to is not None:
                await self._yield_to()
            await self._slots.acquire()
            self.held = True

    def give(self) -> None:
        if self.held:
            self.held = False
            self._slots.release()


class TurnGate:
    def __init__(self, slots: int = 5, yield_to: YieldTo | None = None) -> None:
        self._agents: dict[int, tuple[asyncio.Lock, int]] = {}  # agent -> (lock, users)
        self._slots = asyncio.Semaphore(max(1, slots))
        self._yield_to = yield_to

    def slot(self) -> Slot:
        return Slot(self._slots, self._yield_to)

    @asynccontextmanager
    async def turn(self, agent_id: int) -> AsyncIterator[None]:
        lock, users = self._agents.get(agent_id, (asyncio.Lock(), 0))
        self._agents[agent_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._agents[agent_id]
            if users == 1:
                del self._agents[agent_id]  # nobody waits: forget the agent
            else:
                self._agents[agent_id] = (lock, users - 1)
