"""One drain of an agent at a time in this process, before anything else is taken.

    gate.turn(agent_id)   wait for this process's drain of that agent to end

Handlers of a busy agent (a member who writes several messages at once) wait here, holding
nothing: no connection, no claim. Across processes the agent's claim (core.runtime.presence)
keeps its turns one at a time; this keeps a process from asking for its own claim twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class TurnGate:
    def __init__(self) -> None:
        self._agents: dict[int, tuple[asyncio.Lock, int]] = {}  # agent -> (lock, users)

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
