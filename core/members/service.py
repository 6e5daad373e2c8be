"""What members, admins and operators do with memory outside the agent's own functions.

Members: see their working context, export it, erase it ("forget me"), and set openers on or
off, quiet hours and time zone. Admins (in the platforms) and operators (the `companion`
command): export, import or reset any member's memory, change tenant settings; every such
action is written to the audit log, naming who did it. Permission checks happen in the
adapters (they know the platform's roles); nothing here is reachable by the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import ensure_agent, find_agent, reset_agent
from core.errors import BadSetting
from core.members.portability import Export, export_agent, import_agent
from core.memory.store import AgentStore
from core.models import Agent, AuditEntry, Block, Message, Passage, Tenant, User
from core.ports import Embedder, Progress
from core.schedule.planning import plan_for, replan


@dataclass(frozen=True)
class ScheduledOpener:
    tenant: str
    user: str
    at: datetime  # UTC
    timezone: str  # the member's
    why: str


@dataclass(frozen=True)
class MemoryView:
    blocks: list[tuple[str, str, int]]  # (label, value, limit)
    messages: int
    passages: int
    timezone: str
    settings: dict[str, Any]


def parse_quiet_hours(text: str) -> tuple[time, time]:
    """'22:00-09:00' or '22-9' into two times; the span may cross midnight."""
    match = re.fullmatch(r"\s*(\d{1,2})(?::(\d{2}))?\s*-\s*(\d{1,2})(?::(\d{2}))?\s*", text)
    if not match:
        raise BadSetting("write quiet hours like 22:00-09:00")
    h1, m1, h2, m2 = (int(g) if g else 0 for g in match.groups())
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        raise BadSetting("hours go from 00 to 23 and minutes from 00 to 59")
    return time(h1, m1), time(h2, m2)


def parse_timezone(name: str) -> str:
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, a huge name
        raise BadSetting(
            f"{name.strip()[:60]!r} is not a time zone; try e.g. Europe/Berlin"
        ) from None
    return name.strip()


class Members:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
        embedder: Embedder | None = None,
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.clock = clock
        self.embedder = embedder  # imported passages are embedded with it

    async def view(self, tenant: str, user: str) -> MemoryView | None:
        async with self.sessions() as session:
            scope = await find_agent(session, tenant, user)
            if scope is None:
                return None
            blocks = await session.scalars(
                select(Block).where(Block.agent_id == scope.agent_id).order_by(Block.label)
            )
            messages = await session.scalar(
                select(func.count()).where(Message.agent_id == scope.agent_id)
            )
            passages = await session.scalar(
                select(func.count()).where(Passage.agent_id == scope.agent_id)
            )
            member = await self._user(session, tenant, user)
            assert member is not None
            return MemoryView(
                [(b.label, b.value, b.char_limit) for b in blocks],
                int(messages or 0),
                int(passages or 0),
                member.timezone,
                dict(member.settings or {}),
            )

    async def export(self, tenant: str, user: str) -> dict[str, Any] | None:
        async with self.sessions() as session:
            scope = await find_agent(session, tenant, user)
            return await export_agent(session, scope) if scope else None

    async def forget(self, tenant: str, user: str) -> bool:
        """Erase the member: their agent, all its memory, and their settings."""
        async with self.sessions() as session, session.begin():
            member = await self._user(session, tenant, user)
            if member is None:
                return False
            await session.execute(delete(User).where(User.id == member.id))
            return True

    async def settings(self, tenant: str, user: str, **changes: Any) -> dict[str, Any]:
        """Update a member's settings (openers, quiet_hours, timezone); returns them all."""
        if "quiet_hours" in changes:
            start, end = parse_quiet_hours(changes["quiet_hours"])
            changes["quiet_hours"] = f"{start:%H:%M}-{end:%H:%M}"
        timezone = changes.pop("timezone", None)
        async with self.sessions() as session, session.begin():
            await ensure_agent(session, tenant, user, self.config)
            member = await self._user(session, tenant, user)
            assert member is not None
            if timezone is not None:
                member.timezone = parse_timezone(timezone)
                changes["timezone_from"] = "member"
            member.settings = {**(member.settings or {}), **changes}
            agent = await session.scalar(select(Agent).where(Agent.user_id == member.id))
            if agent is not None:  # an opt-out or new quiet hours take effect at once
                await replan(session, agent, self.config.schedule)
            return {**member.settings, "timezone": member.timezone}

    async def adopt_timezone(self, tenant: str, user: str, lookup: Any) -> None:
        """Take the member's time zone from their platform profile, once, unless they set one.

        `lookup()` returns the profile's zone name (or None); it is only called when needed.
        """
        async with self.sessions() as session, session.begin():
            member = await self._user(session, tenant, user)
            if member is None or (member.settings or {}).get("timezone_from"):
                return
            zone = await lookup()
            try:
                member.timezone = parse_timezone(zone) if zone else member.timezone
            except BadSetting:
                pass  # an odd profile value: keep UTC
            member.settings = {**(member.settings or {}), "timezone_from": "platform"}
            agent = await session.scalar(select(Agent).where(Agent.user_id == member.id))
            if agent is not None:
                await replan(session, agent, self.config.schedule)

    async def tenant_settings(
        self, tenant: str, actor: str | None = None, **changes: Any
    ) -> dict[str, Any]:
        """Read, and with `changes` update, a tenant's settings (e.g. welcome=True).

        A change names its `actor`, an admin, and goes to the audit log.
        """
        async with self.sessions() as session, session.begin():
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            if row is None:
                row = Tenant(key=tenant, settings={})
                session.add(row)
            if changes:
                row.settings = {**(row.settings or {}), **changes}
                await session.flush()
                await self._audit_in(
                    session, tenant, actor or "operator", "settings", None, changes
                )
            return dict(row.settings or {})

    async def admin_export(self, tenant: str, actor: str, user: str) -> dict[str, Any] | None:
        doc = await self.export(tenant, user)
        await self._audit(tenant, actor, "export", user, {"found": doc is not None})
        return doc

    async def admin_reset(self, tenant: str, actor: str, user: str) -> bool:
        """Erase a member's memory (after any turn in progress); False if there was none."""
        async with self.sessions() as session, session.begin():
            scope = await reset_agent(session, tenant, user, self.config)
            await self._audit_in(session, tenant, actor, "reset", user, {"found": bool(scope)})
            return scope is not None

    async def admin_import(
        self,
        tenant: str,
        actor: str,
        user: str,
        export: Export,
        replace: bool = False,
        progress: Progress | None = None,
    ) -> dict[str, int]:
        """Restore an export (see `parse_export`) into a member, after any turn in progress.

        Raises `ImportConflict` when the member has memory and `replace` is not set; then
        nothing is written.
        """
        async with self.sessions() as session, session.begin():
            scope = await ensure_agent(session, tenant, user, self.config, export.display_name)
            store = AgentStore(session, scope, self.config.max_message_tokens)
            await store.lock_agent()  # a running turn finishes first
            counts = await import_agent(
                session, scope, export, self.config, self.clock(), self.embedder, replace, progress
            )
            await self._audit_in(
                session, tenant, actor, "import", user, {**counts, "replace": replace}
            )
            return counts

    async def scheduled_openers(
        self, now: datetime, due_only: bool = False
    ) -> list[ScheduledOpener]:
        """Every member with an opener planned, soonest first, and why then."""
        query = (
            select(Agent, Tenant.key, User.external_id, User.timezone)
            .join(User, User.id == Agent.user_id)
            .join(Tenant, Tenant.id == Agent.tenant_id)
            .where(Agent.next_opener_at.is_not(None))
            .order_by(Agent.next_opener_at)
        )
        if due_only:
            query = query.where(Agent.next_opener_at <= now)
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
            found = []
            for agent, tenant, user, zone in rows:
                plan = await plan_for(session, agent, self.config.schedule)
                assert agent.next_opener_at is not None  # the query asked for it
                found.append(ScheduledOpener(tenant, user, agent.next_opener_at, zone, plan.why))
            return found

    async def audit_log(self, tenant: str, limit: int = 50) -> list[AuditEntry]:
        async with self.sessions() as session:
            rows = await session.scalars(
                select(AuditEntry)
                .join(Tenant, Tenant.id == AuditEntry.tenant_id)
                .where(Tenant.key == tenant)
                .order_by(AuditEntry.id.desc())
                .limit(limit)
            )
            return list(rows)

    async def _audit(
        self, tenant: str, actor: str, action: str, target: str, detail: dict[str, Any]
    ) -> None:
        async with self.sessions() as session, session.begin():
            await self._audit_in(session, tenant, actor, action, target, detail)

    async def _audit_in(
        self,
        session: AsyncSession,
        tenant: str,
        actor: str,
        action: str,
        target: str | None,
        detail: dict[str, Any],
    ) -> None:
        tenant_id = await session.scalar(select(Tenant.id).where(Tenant.key == tenant))
        if tenant_id is None:
            session.add(Tenant(key=tenant, settings={}))
            await session.flush()
            tenant_id = await session.scalar(select(Tenant.id).where(Tenant.key == tenant))
        session.add(
            AuditEntry(
                tenant_id=tenant_id,
                actor=actor,
                action=action,
                target=target,
                detail=detail,
                created_at=self.clock(),
            )
        )

    @staticmethod
    async def _user(session: AsyncSession, tenant: str, user: str) -> User | None:
        return await session.scalar(
            select(User)
            .join(Tenant, Tenant.id == User.tenant_id)
            .where(Tenant.key == tenant, User.external_id == user)
        )
