"""Which agents this process is working on, held in Postgres without a connection per turn.

A turn holds no database connection while the model thinks. What keeps each agent's turns
one at a time, in order, across processes is an advisory lock per agent, taken on the one
connection this process keeps open for that purpose. Postgres releases the locks when that
connection ends, so a killed process's agents are free at once: no lease to wait out, no
clock to trust.

    presence.claim(agent_id)          take the agent (a `Claim`), or None: another process
                                      is working on it
    presence.release(claim)           let it go
    presence.enter(session, scope, claim)  a turn's transaction enters the member's scope
                                      and confirms the claim is still held, in one
                                      statement (`ClaimLost` if not: the presence
                                      connection was lost, say by a database restart, and
                                      another process may have taken the agent meanwhile)

The presence connection is opened on first use, used by one caller at a time, and opened
again after a loss; claims made on the lost one are gone with it.

`Checkpoint` is a turn's pause around each model call: commit, let the connection go,
and afterwards lock the agent again and confirm the claim.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, InterfaceError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from core.errors import ClaimLost
from core.memory.store import AgentStore
from core.runtime.gate import Slot
from core.scope import Scope
from core.stopping import stop_within

log = logging.getLogger(__name__)

# The advisory lock of agent N is (TURNS, N): Postgres's two-key form, apart from the
# single-key locks of the embedding worker and migrations.
TURNS = 0x434F4D50  # "COMP"


_ENTER_CONFIRMED = text(
    "SELECT companion_enter(:tenant, :agent), EXISTS (SELECT 1 FROM pg_locks "
    "WHERE locktype = 'advisory' AND classid = :turns AND objid = :key AND objsubid = 2 "
    "AND pid = :backend AND granted)"
)


def _key(agent_id: int) -> int:
    """The lock's second key: an int4 (agents past two billion share keys with others: they
    would take turns with them, never together)."""
    return agent_id % 2_147_483_647


@dataclass(frozen=True)
class Claim:
    agent_id: int
    backend: int  # the presence connection's backend pid the lock was taken on


class Presence:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._connection: AsyncConnection | None = None
        self._backend = 0
        self._held: set[int] = set()  # keys claimed on this connection (its locks stack)
        self._use = asyncio.Lock()

    async def claim(self, agent_id: int) -> Claim | None:
        """The agent for this process until `release`, unless another process, or another
        caller in this one, has it."""
        query = text("SELECT pg_try_advisory_lock(:turns, :agent)")
        async with self._use:
            if _key(agent_id) in self._held:
                return None
            for attempt in (1, 2):
                try:
                    connection = await self._connect()
                    params = {"turns": TURNS, "agent": _key(agent_id)}
                    if not await connection.scalar(query, params):
                        return None
                    self._held.add(_key(agent_id))
                    return Claim(agent_id, self._backend)
                except (DBAPIError, InterfaceError, OSError):
                    await self._lost()
                    if attempt == 2:
                        raise
        return None

    async def release(self, claim: Claim) -> None:
        """Let the agent go (nothing to do if the connection it was taken on is gone)."""
        async with self._use:
            if self._connection is None or claim.backend != self._backend:
                return
            self._held.discard(_key(claim.agent_id))
            try:
                await self._connection.execute(
                    text("SELECT pg_advisory_unlock(:turns, :agent)"),
                    {"turns": TURNS, "agent": _key(claim.agent_id)},
                )
            except (DBAPIError, InterfaceError, OSError):
                await self._lost()

    async def enter(self, session: AsyncSession, scope: Scope, claim: Claim) -> None:
        """`enter_scope` for a turn's transaction, which also asks whether the claim's lock
        is still held (on the turn's own connection): `ClaimLost` if not. One round trip,
        where two statements took two (a turn has two or more transactions per event)."""
        params = {"tenant": scope.tenant_id, "agent": scope.agent_id}
        params.update(turns=TURNS, key=_key(claim.agent_id), backend=claim.backend)
        row = (await session.execute(_ENTER_CONFIRMED, params)).first()
        if row is None or not row[1]:
            raise ClaimLost(claim.agent_id)

    async def close(self) -> None:
        """Let go of the presence connection (and every claim on it), within STOP_SECONDS:
        a database that stopped answering does not keep the process from exiting."""
        async with self._use:
            connection, self._connection = self._connection, None
            self._held.clear()
            if connection is not None:
                await stop_within("the presence connection", connection.close())

    async def _connect(self) -> AsyncConnection:
        if self._connection is None:
            connection = await self.engine.connect()
            connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
            self._backend = int(await connection.scalar(text("SELECT pg_backend_pid()")) or 0)
            self._connection = connection
        return self._connection

    async def _lost(self) -> None:
        """The presence connection failed: its claims are gone; the next use opens anew."""
        log.warning("lost the database connection that holds this process's turns")
        connection, self._connection = self._connection, None
        self._held.clear()

        if connection is not None:
            try:
                await connection.invalidate()
            except Exception:  # noqa: BLE001  (already broken: nothing more to do)
                pass


class Checkpoint:
    """A turn's transactions around each model call (the turn's `Pause`): what it did so
    far is committed and its connection goes back to the pool while the model thinks; after
    the call a new transaction enters the member's scope, locks the agent's row again and
    confirms the claim, so a turn never writes over another process's."""

    def __init__(
        self,
        session: AsyncSession,
        store: AgentStore,
        presence: Presence,
        claim: Claim,
        slot: Slot,
    ) -> None:
        self.session, self.store = session, store
        self.presence, self.claim, self.slot = presence, claim, slot

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        await self.session.commit()
        self.slot.give()  # no connection held while the model thinks
        try:
            yield
        finally:
            await self.slot.take()
            await self.resume()

    async def resume(self) -> None:
        """A new transaction of the turn, as its first did: scope and claim, row lock."""
        await self.presence.enter(self.session, self.store.scope, self.claim)
        await self.store.relock()
