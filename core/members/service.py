"""What members, admins and operators do with memory outside the agent's own functions.

Members: see their working context, conversation and archival passages, correct them (edit a
block within its limit, delete a passage), export it all, erase it ("forget me"), and set
openers on or off, quiet hours and time zone. Admins (in the platforms and the inspector) and
operators (the `companion` command): the same for any member of their tenant, plus import,
reset and tenant settings; every such action is written to the audit log, naming who did it.
Methods that take an `actor` are the member's own when it is None, and audited otherwise.
Permission checks happen at the edges (they know the platform's roles and the browser's
session); nothing here is reachable by the model.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import (
    ensure_agent,
    erase_member,
    find_agent,
    find_user,
    lock_tenant,
    reset_agent,
)
from core.errors import BadSetting, BlockRefused
from core.members import browse
from core.members.admission import Admission
from core.members.dm_homes import DmHomes
from core.members.profiles import Profiles
from core.members.spending import MemberDay, member_days
from core.members.zones import ProfileZones, parse_timezone
from core.memory.search import Page, recall_search
from core.memory.store import AgentStore, write_block
from core.models import Agent, AuditEntry, Block, Message, Passage, Tenant, User
from core.ports import Embedder, Progress
from core.schedule.planning import plan_for, replan
from core.scope import Scope, enter_scope
from core.tenants.audit import record

if TYPE_CHECKING:
    from core.members.portability import Export

SEARCH_PAGE = 10


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
    display_name: str | None = None


def parse_quiet_hours(text: str) -> tuple[time, time]:
    """'22:00-09:00' or '22-9' into two times; the span may cross midnight."""
    match = re.fullmatch(r"\s*(\d{1,2})(?::(\d{2}))?\s*-\s*(\d{1,2})(?::(\d{2}))?\s*", text)
    if not match:
        raise BadSetting("write quiet hours like 22:00-09:00")
    h1, m1, h2, m2 = (int(g) if g else 0 for g in match.groups())
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        raise BadSetting("hours go from 00 to 23 and minutes from 00 to 59")
    return time(h1, m1), time(h2, m2)


def _tidy(text: str) -> str:
    """A block's text as a browser form sends it back: newlines as \\n, no outer blanks."""
    return text.replace("\r\n", "\n").strip()


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
        self.dm_homes = DmHomes(sessions, config, clock)  # whose memory DMs use
        self.zones = ProfileZones(sessions, config, clock)  # time zones from profiles
        self.profiles = Profiles(sessions, config, clock)  # the community's companion
        self.admission = Admission(sessions, config, clock)  # where it answers, and whom

    @asynccontextmanager
    async def _reading(
        self, tenant: str, user: str, actor: str | None, action: str, **detail: Any
    ) -> AsyncIterator[tuple[AsyncSession, Scope | None]]:
        """One transaction on a member's memory, behind their row-level wall.

        An admin's access (`actor` set) goes to the audit log first, in the same transaction.
        """
        async with self.sessions() as session, session.begin():
            scope = await find_agent(session, tenant, user)
            if actor is not None:
                detail["found"] = scope is not None
                await record(session, tenant, actor, action, user, detail, self.clock())
            if scope is not None:
                await enter_scope(session, scope)
            yield session, scope

    async def profile(self, tenant: str, user: str) -> tuple[str | None, str] | None:
        """The member's display name and time zone, for showing times; None if unknown."""
        async with self.sessions() as session:
            member = await find_user(session, tenant, user)
            return (member.display_name, member.timezone) if member else None

    async def view(self, tenant: str, user: str, actor: str | None = None) -> MemoryView | None:
        page = {"page": "working context"}
        async with self._reading(tenant, user, actor, "view", **page) as (session, scope):
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
            member = await find_user(session, tenant, user)
            assert member is not None
            return MemoryView(
                [(b.label, b.value, b.char_limit) for b in blocks],
                int(messages or 0),
                int(passages or 0),
                member.timezone,
                dict(member.settings or {}),
                member.display_name,
            )

    async def edit_block(
        self,
        tenant: str,
        user: str,
        label: str,
        value: str,
        expected: str | None = None,
        actor: str | None = None,
    ) -> None:
        """Set a block's text, within its limit, as the model's own functions would.

        `expected` is the text the editor started from: if the agent changed the block
        meanwhile, nothing is written. Raises `BlockRefused` with what to do instead.
        """
        value = _tidy(value)
        async with self._reading(tenant, user, actor, "edit", block=label) as (session, scope):
            if scope is None:
                raise BlockRefused(label, "there is no memory to edit yet")
            store = AgentStore(session, scope, self.config.max_message_tokens)
            await store.lock_agent()  # a turn in progress finishes first
            block = (await store.blocks()).get(label)
            if block is None:
                raise BlockRefused(label, f"there is no block {label!r}")
            if expected is not None and _tidy(block.value) != _tidy(expected):
                raise BlockRefused(
                    label,
                    f"block {label!r} changed while you were editing it; "
                    "your text is kept below, next to the new one",
                )
            write_block(block, value, self.clock())

    async def conversation(
        self, tenant: str, user: str, before: int | None = None, actor: str | None = None
    ) -> browse.Conversation:
        """What was said (newest page, or the page before message id `before`)."""
        page = {"page": "conversation"}
        async with self._reading(tenant, user, actor, "view", **page) as (session, scope):
            if scope is None:
                return browse.Conversation([], None)
            return await browse.recent_conversation(session, scope, before)

    async def search(
        self, tenant: str, user: str, query: str, page: int = 1, actor: str | None = None
    ) -> Page:
        """Recall search, as the agent's own `conversation_search` ranks it."""
        async with self._reading(tenant, user, actor, "search", query=query) as (session, scope):
            if scope is None or not query.strip():
                return Page([], 1, 1, 0)
            return await recall_search(session, scope, query, max(page, 1), SEARCH_PAGE)

    async def passages(
        self, tenant: str, user: str, page: int = 1, actor: str | None = None
    ) -> browse.Passages:
        async with self._reading(tenant, user, actor, "view", page="archival") as (session, scope):
            if scope is None:
                return browse.Passages([], 1, 1, 0)
            return await browse.passage_page(session, scope, page)

    async def delete_passage(
        self, tenant: str, user: str, passage_id: int, actor: str | None = None
    ) -> bool:
        """Delete one of the member's archival passages; False if they have no such passage."""
        async with self._reading(tenant, user, actor, "delete passage", passage=passage_id) as (
            session,
            scope,
        ):
            return scope is not None and await browse.remove_passage(session, scope, passage_id)

    async def opener_status(
        self, tenant: str, user: str, actor: str | None = None
    ) -> browse.OpenerStatus | None:
        async with self._reading(tenant, user, actor, "view", page="settings") as (session, scope):
            if scope is None:
                return None
            return await browse.opener_status(session, scope, self.config.schedule)

    async def export(self, tenant: str, user: str) -> dict[str, Any] | None:
        async with self.sessions() as session:
            # One snapshot: a turn committing meanwhile is in the export whole or not at all.
            await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            scope = await find_agent(session, tenant, user)
            from core.members.portability import export_agent  # pydantic models: on use

            return await export_agent(session, scope) if scope else None

    async def forget(self, tenant: str, user: str) -> bool:
        """Erase the member: their agent, all its memory, their settings and their inspector
        sessions, in one transaction (from any front end). A block by the community's admins
        is theirs, not the member's, and stays."""
        async with self.sessions() as session, session.begin():
            member = await find_user(session, tenant, user)
            blocked = member is not None and bool((member.settings or {}).get("blocked"))
            erased = await erase_member(session, tenant, user, self.clock())
            if erased and blocked and member is not None:
                kept = {"blocked": True, "blocked_told": True}
                session.add(User(tenant_id=member.tenant_id, external_id=user, settings=kept))
            return erased

    async def settings(self, tenant: str, user: str, **changes: Any) -> dict[str, Any]:
        """Update a member's settings (openers, quiet_hours, timezone); returns them all."""
        if "quiet_hours" in changes:
            start, end = parse_quiet_hours(changes["quiet_hours"])
            changes["quiet_hours"] = f"{start:%H:%M}-{end:%H:%M}"
        timezone = changes.pop("timezone", None)
        async with self.sessions() as session, session.begin():
            await ensure_agent(session, tenant, user, self.config)
            member = await find_user(session, tenant, user, lock=True)
            assert member is not None
            if timezone is not None:
                member.timezone = parse_timezone(timezone)
                changes["timezone_from"] = "member"
            member.settings = {**(member.settings or {}), **changes}
            agent = await session.scalar(select(Agent).where(Agent.user_id == member.id))
            if agent is not None:  # an opt-out or new quiet hours take effect at once
                await replan(session, agent, self.config.schedule)
            return {**member.settings, "timezone": member.timezone}

    async def tenant_settings(
        self, tenant: str, actor: str | None = None, **changes: Any
    ) -> dict[str, Any]:
        """Read, and with `changes` update, a tenant's settings (e.g. welcome=True).

        A change names its `actor`, an admin, and goes to the audit log.
        """
        async with self.sessions() as session, session.begin():
            if not changes:
                row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
                return dict(row.settings or {}) if row else {}
            await session.execute(
                insert(Tenant).values(key=tenant, settings={}).on_conflict_do_nothing()
            )
            row = await lock_tenant(session, tenant)
            assert row is not None
            row.settings = {**(row.settings or {}), **changes}
            await session.flush()
            await self._audit_in(session, tenant, actor or "operator", "settings", None, changes)
            return dict(row.settings or {})

    async def admin_export(self, tenant: str, actor: str, user: str) -> dict[str, Any] | None:
        doc = await self.export(tenant, user)
        await self._audit(tenant, actor, "export", user, {"found": doc is not None})
        return doc

    async def admin_reset(self, tenant: str, actor: str, user: str) -> bool:
        """Erase a member's memory (after any turn in progress); False if there was none."""
        async with self.sessions() as session, session.begin():
            scope = await reset_agent(session, tenant, user, self.config, self.clock())
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
        # The name is the export's member's: another member keeps their own.
        same = (tenant, user) == (export.tenant, export.user)
        async with self.sessions() as session, session.begin():
            scope = await ensure_agent(
                session, tenant, user, self.config, export.display_name if same else None
            )
            store = AgentStore(session, scope, self.config.max_message_tokens)
            await store.lock_agent()  # a running turn finishes first
            from core.members.portability import import_agent

            counts = await import_agent(
                session,
                scope,
                export,
                self.config,
                self.clock(),
                self.embedder,
                replace,
                progress,
                f"{user}@{tenant}",
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

    async def usage(self, since: date, tenant: str | None = None) -> list[MemberDay]:
        """Model usage per member and UTC day from `since` on: by day, tenant, member."""
        async with self.sessions() as session:
            return await member_days(session, since, tenant)

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
        await record(session, tenant, actor, action, target, detail, self.clock())
