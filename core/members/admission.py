"""Where a community's companion answers and whom: the admins' rules, checked for every
message before it is stored.

    admit(tenant, user, where)          Admitted: answer it, or not (and what to tell them)
    reach(tenant)                       where it answers (kept per process for REACH_TTL)
    change_reach(tenant, actor, ...)    audited
    place(tenant, actor, channel, mode) one channel: answer, never, open or default
    block(tenant, actor, user, on)      audited; openers stop at once, memory stays
    blocked(tenant)                     the blocked members

A message the companion does not answer is not stored: the member's memory stays as it
was. A blocked member is told once, politely, the first time they write after the block;
a direct message in a community that turned DMs off is told where to write instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.companion import MAX_CHANNELS, REACH_KEY, Reach, Where, reach_of
from core.config import EngineConfig
from core.errors import BadSetting
from core.models import Agent, Tenant, User
from core.schedule.planning import replan
from core.tenants.audit import record

CHANNEL_MODES = ("answer", "never", "open", "default")
REACH_TTL = 10.0  # seconds a process keeps a community's rules before reading them again
BLOCKED_NOTICE = (
    "The admins of this community have paused my conversations with you, so I won't answer "
    "here for now. What I remember of you is kept. If you think this is a mistake, please "
    "ask one of the admins."
)
DMS_OFF = (
    "This community has turned off direct messages with me. Mention me in one of its "
    "channels instead."
)


# Built once (a statement built per message costs more CPU than sending it): the member's
# id and whether the admins blocked them.
_MEMBER = (
    select(User.id, User.settings["blocked"].as_boolean())
    .join(Tenant, Tenant.id == User.tenant_id)
    .where(Tenant.key == bindparam("tenant"), User.external_id == bindparam("user"))
)


@dataclass(frozen=True)
class Admitted:
    answer: bool
    notice: str | None = None  # what to tell the member instead, if anything


@dataclass(frozen=True)
class BlockedMember:
    user: str
    display_name: str | None


class Admission:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions, self.config, self.clock = sessions, config, clock
        self.monotonic = monotonic
        self._kept: dict[str, tuple[float, Reach]] = {}

    async def reach(self, tenant: str) -> Reach:
        kept = self._kept.get(tenant)
        if kept is not None and kept[0] > self.monotonic():
            return kept[1]
        async with self.sessions() as session:
            settings = await session.scalar(select(Tenant.settings).where(Tenant.key == tenant))
        rules = reach_of(settings)
        self._kept[tenant] = (self.monotonic() + REACH_TTL, rules)
        return rules

    async def admit(
        self, tenant: str, user: str, where: Where, session: AsyncSession | None = None
    ) -> Admitted:
        """Whether this member's message, written there, is answered (and stored); in
        `session`'s transaction when given (the one that stores the message)."""
        rules = await self.reach(tenant)
        if not rules.answers(where):
            return Admitted(False, DMS_OFF if where.channel is None else None)
        if session is not None:
            return await self._unblocked(session, tenant, user)
        async with self.sessions() as session, session.begin():
            return await self._unblocked(session, tenant, user)

    async def _unblocked(self, session: AsyncSession, tenant: str, user: str) -> Admitted:
        member = (await session.execute(_MEMBER, {"tenant": tenant, "user": user})).first()
        if member is None or not member[1]:
            return Admitted(True)
        # Told once: of several messages at once, only one finds the flag unset.
        told = await session.execute(
            update(User)
            .where(User.id == member[0], ~User.settings.has_key("blocked_told"))
            .values(settings=User.settings.op("||")({"blocked_told": True}))
            .returning(User.id)
        )
        return Admitted(False, BLOCKED_NOTICE if told.first() is not None else None)

    async def change_reach(
        self,
        tenant: str,
        actor: str,
        *,
        channels: tuple[str, ...] | None = None,
        never: tuple[str, ...] | None = None,
        open_channel: str | None = None,
        dms: bool | None = None,
        names: dict[str, str] | None = None,
    ) -> Reach:
        """Save what is given (None: unchanged), audited; `names`: channels' names to show."""
        async with self.sessions() as session, session.begin():
            settings = await session.scalar(select(Tenant.settings).where(Tenant.key == tenant))
            before = reach_of(settings)
            wanted = Reach(
                before.channels if channels is None else channels,
                before.never if never is None else never,
                before.open_channel if open_channel is None else open_channel,
                before.dms if dms is None else dms,
                tuple(sorted({**dict(before.names), **(names or {})}.items())),
            )
            longest = max(len(wanted.channels), len(wanted.never))
            if longest > MAX_CHANNELS:  # as many as the admin pages' lists take
                raise BadSetting(f"at most {MAX_CHANNELS} channels, got {longest}")
            both = set(wanted.channels) & set(wanted.never)
            if both or wanted.open_channel in wanted.never:
                clash = ", ".join(sorted(both)) or wanted.open_channel
                raise BadSetting(
                    f"{clash} cannot be both a channel it answers in and one it never does"
                )
            changes = {
                key: value
                for key, value in wanted.stored.items()
                if key != "names" and before.stored[key] != value
            }
            await record(session, tenant, actor, "where", None, changes, self.clock())
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            assert row is not None  # the audit entry made sure of it
            row.settings = {**(row.settings or {}), REACH_KEY: wanted.stored}
        self._kept[tenant] = (self.monotonic() + REACH_TTL, wanted)
        return wanted

    async def place(
        self, tenant: str, actor: str, channel: str, mode: str, name: str | None = None
    ) -> Reach:
        """One channel's place in the rules: `answer` (one of the channels it answers in),
        `never`, `open` (every message there is for it) or `default` (none of these)."""
        if mode not in CHANNEL_MODES:
            raise BadSetting(f"a channel is one of {', '.join(CHANNEL_MODES)}, not {mode!r}")
        self._kept.pop(tenant, None)
        before = await self.reach(tenant)
        channels = tuple(c for c in before.channels if c != channel)
        never = tuple(c for c in before.never if c != channel)
        opened = "" if before.open_channel == channel else before.open_channel
        if mode == "answer":
            channels += (channel,)
        elif mode == "never":
            never += (channel,)
        elif mode == "open":
            opened = channel
        return await self.change_reach(
            tenant,
            actor,
            channels=channels,
            never=never,
            open_channel=opened,
            names={channel: name} if name else None,
        )

    async def block(self, tenant: str, actor: str, user: str, blocked: bool) -> bool:
        """Block or unblock a member (who may not have written yet); audited. Returns
        whether that changed anything. Their memory stays; openers stop or come back."""
        async with self.sessions() as session, session.begin():
            await record(
                session, tenant, actor, "block" if blocked else "unblock", user, {}, self.clock()
            )
            tenant_id = await session.scalar(select(Tenant.id).where(Tenant.key == tenant))
            await session.execute(
                insert(User)
                .values(tenant_id=tenant_id, external_id=user, settings={})
                .on_conflict_do_nothing()
            )
            member = await session.scalar(
                select(User).where(User.tenant_id == tenant_id, User.external_id == user)
            )
            assert member is not None
            was = bool((member.settings or {}).get("blocked"))
            settings = {k: v for k, v in (member.settings or {}).items() if k != "blocked_told"}
            member.settings = {**settings, "blocked": blocked}
            await session.flush()
            agent = await session.scalar(select(Agent).where(Agent.user_id == member.id))
            if agent is not None:
                await replan(session, agent, self.config.schedule)
            return was != blocked

    async def blocked(self, tenant: str) -> list[BlockedMember]:
        async with self.sessions() as session:
            rows = await session.execute(
                select(User.external_id, User.display_name)
                .join(Tenant, Tenant.id == User.tenant_id)
                .where(Tenant.key == tenant, User.settings["blocked"].as_boolean())
                .order_by(User.external_id)
            )
            return [BlockedMember(*row) for row in rows.all()]
