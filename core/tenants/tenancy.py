"""A community arriving, leaving, and being erased.

When a platform removes the bot from a community (a Slack workspace uninstalls the app or
revokes its bot token), the community's memory is not erased at once: people uninstall by
mistake, or reinstall after a permission change. It is kept for `GRACE` (30 days), with no
openers sent and no replies retried meanwhile; installing again within it keeps everything.
After it, the scheduler erases the community (`erase_departed`); an operator may erase it
at once (`companion tenant erase`).

    arrived(tenant)        installed (again): the community is no longer leaving
    departed(tenant)       removed: the grace period starts (if it had not already)
    members(tenant)        how many members it has (None: no such tenant)
    erase(tenant, actor)   every member's memory and settings, the community's settings and
                           its inspector sessions, in one transaction, audited. The tenant
                           row stays, with its audit log (who did what, no memory)
    erase_departed()       erase every community whose grace period is over
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.directory import end_sessions
from core.models import Tenant, User
from core.tenants.audit import record

GRACE = timedelta(days=30)
RETENTION = "retention: {days} days after the platform removed the bot"


@dataclass(frozen=True)
class Erased:
    tenant: str
    members: int  # members whose memory was erased


class Tenancy:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Callable[[], datetime],
        grace: timedelta = GRACE,
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        self.grace = grace

    async def arrived(self, tenant: str) -> None:
        async with self.sessions() as session, session.begin():
            await session.execute(
                insert(Tenant)
                .values(key=tenant, settings={})
                .on_conflict_do_update(index_elements=[Tenant.key], set_={"departed_at": None})
            )

    async def departed(self, tenant: str) -> None:
        """The grace period starts now, unless it started already (a second revocation)."""
        async with self.sessions() as session, session.begin():
            await session.execute(
                update(Tenant)
                .where(Tenant.key == tenant, Tenant.departed_at.is_(None))
                .values(departed_at=self.clock())
            )

    async def members(self, tenant: str) -> int | None:
        """How many members a community has; None when there is no such tenant."""
        async with self.sessions() as session:
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            return None if row is None else await self._count(session, row)

    async def departed_at(self, tenant: str) -> datetime | None:
        async with self.sessions() as session:
            return await session.scalar(select(Tenant.departed_at).where(Tenant.key == tenant))

    async def erase(self, tenant: str, actor: str) -> Erased | None:
        """Erase a community now; None when there is no such tenant."""
        async with self.sessions() as session, session.begin():
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant).with_for_update())
            if row is None:
                return None
            return await self._erase(session, row, actor)

    async def erase_departed(self) -> list[Erased]:
        """Erase every community whose grace period is over (one process takes each)."""
        cutoff = self.clock() - self.grace
        actor = RETENTION.format(days=self.grace.days)
        async with self.sessions() as session, session.begin():
            rows = await session.scalars(
                select(Tenant)
                .where(Tenant.departed_at <= cutoff)
                .order_by(Tenant.departed_at)
                .with_for_update(skip_locked=True)
            )
            return [await self._erase(session, row, actor) for row in list(rows)]

    @staticmethod
    async def _count(session: AsyncSession, tenant: Tenant) -> int:
        found = await session.scalar(
            select(func.count()).select_from(User).where(User.tenant_id == tenant.id)
        )
        return int(found or 0)

    async def _erase(self, session: AsyncSession, tenant: Tenant, actor: str) -> Erased:
        members = await self._count(session, tenant)
        # Deleting a user cascades to their agent and everything it owns (blocks, messages,
        # summaries, passages, events, outbox, usage).
        await session.execute(delete(User).where(User.tenant_id == tenant.id))
        await end_sessions(session, tenant.key, None)
        departed = tenant.departed_at
        tenant.settings = {}
        tenant.departed_at = None  # nothing left to wait for
        detail: dict[str, Any] = {"members": members}
        if departed is not None:
            detail["departed_at"] = departed.isoformat()
        await record(session, tenant.key, actor, "erase tenant", None, detail, self.clock())
        return Erased(tenant.key, members)
