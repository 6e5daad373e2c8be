"""Who may start a turn in this process, before it takes a database connection.

    gate.turn(agent_id)   wait for this process's turn of that agent to end, then for a
                          free slot; only then open the transaction that locks the agent

A turn holds a pooled connection from its agent's row lock to its commit, model calls
included. Without this gate, every handler of a busy agent would take a connection only to
wait for that row lock, and a few chatty members could hold the whole pool: the messages of
everyone else, the deliveries and /readyz would then wait for a connection and time out.
Waiting here costs no connection: one handler per agent (per process) waits on the row lock
(for a turn of another process), and at most `slots` turns hold connections at once, which
leaves the rest of the pool to storing events, delivering replies and health checks. The row
lock still keeps one turn per agent across processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class TurnGate:
    def __init__(self, slots: int) -> None:
        self._slots = asyncio.Semaphore(max(1, slots))
        self._agents: dict[int, tuple[asyncio.Lock, int]] = {}  # agent -> (lock, users)

    @asynccontextmanager
    async def turn(self, agent_id: int) -> AsyncIterator[None]:
        lock, users = self._agents.get(agent_id, (asyncio.Lock(), 0))
        self._agents[agent_id] = (lock, users + 1)
        try:
            async with lock, self._slots:
                yield
        finally:
            lock, users = self._agents[agent_id]
            if users == 1:
                del self._agents[agent_id]  # nobody waits: forget the agent
            else:
                self._agents[agent_id] = (lock, users - 1)
