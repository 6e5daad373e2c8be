"""Whose memory a member's direct messages use, decided once and kept.

A direct message comes from no community, but every agent belongs to one. The first DM of
a platform user picks their DM home, in this order, and records why (`chosen`):

    member      the member chose it (`/memory home` in that community)
    configured  the deployment's home community (COMPANION_DISCORD_HOME_GUILD)
    memory      of the communities the bot serves, the one where they talked most recently
    only        the bot serves exactly one community (among those they share with it)
    first       several, none with memory of them yet: the oldest the bot knows
    fallback    none known: a DM-only community (`<platform>:dm`)

Once recorded, the home does not move when the bot joins more servers or the configured
home changes: the conversation keeps its memory. Only the member moves it; erasing the
member in that community (forget me) erases the choice too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import ensure_agent
from core.models import Agent, DmHome, Tenant, User


@dataclass(frozen=True)
class Home:
    tenant: str  # tenant key, e.g. "discord:123"
    chosen: str  # why: member | configured | memory | only | first | fallback


async def recorded(session: AsyncSession, platform: str, user: str) -> Home | None:
    row = (
        await session.execute(
            select(Tenant.key, DmHome.chosen)
            .join(Tenant, Tenant.id == DmHome.tenant_id)
            .where(DmHome.platform == platform, DmHome.external_id == user)
        )
    ).first()
    return Home(row[0], row[1]) if row else None


async def _most_recent(session: AsyncSession, user: str, tenants: Sequence[str]) -> str | None:
    """Of `tenants`, the one where `user` has an agent that heard from them last."""
    return await session.scalar(
        select(Tenant.key)
        .join(User, User.tenant_id == Tenant.id)
        .join(Agent, Agent.user_id == User.id)
        .where(Tenant.key.in_(tenants), User.external_id == user)
        .order_by(Agent.last_active_at.desc().nulls_last(), Agent.id)
        .limit(1)
    )


async def _oldest(session: AsyncSession, tenants: Sequence[str]) -> str | None:
    return await session.scalar(
        select(Tenant.key).where(Tenant.key.in_(tenants)).order_by(Tenant.id).limit(1)
    )


async def pick(
    session: AsyncSession,
    platform: str,
    user: str,
    served: Sequence[str],
    configured: str | None,
) -> Home:
    """The home a first DM gets (see the module's docstring); `served` are the communities
    the bot serves, those shared with the user first when the platform says which."""
    if configured:
        return Home(configured, "configured")
    if found := await _most_recent(session, user, served):
        return Home(found, "memory")
    if len(served) == 1:
        return Home(served[0], "only")
    if found := await _oldest(session, served):
        return Home(found, "first")
    if served:
        return Home(served[0], "first")
    return Home(f"{platform}:dm", "fallback")


async def record(
    session: AsyncSession,
    platform: str,
    user: str,
    home: Home,
    config: EngineConfig,
    now: datetime,
    overwrite: bool,
) -> None:
    """Keep `home` for the user's DMs (their agent there is created if missing); without
    `overwrite`, a home recorded meanwhile (a concurrent first DM) stays."""
    scope = await ensure_agent(session, home.tenant, user, config)
    user_id = await session.scalar(select(Agent.user_id).where(Agent.id == scope.agent_id))
    values = {
        "platform": platform,
        "external_id": user,
        "tenant_id": scope.tenant_id,
        "user_id": user_id,
        "chosen": home.chosen,
        "updated_at": now,
    }
    statement = insert(DmHome).values(**values)
    keys = [DmHome.platform, DmHome.external_id]
    changed = {k: values[k] for k in ("tenant_id", "user_id", "chosen", "updated_at")}
    await session.execute(
        statement.on_conflict_do_update(index_elements=keys, set_=changed)
        if overwrite
        else statement.on_conflict_do_nothing(index_elements=keys)
    )


class DmHomes:
    """The service adapters use: where a DM goes, and the member's own choice of it."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.clock = clock

    async def home(self, platform: str, user: str) -> Home | None:
        async with self.sessions() as session:
            return await recorded(session, platform, user)

    async def communities(self, platform: str, user: str) -> list[str]:
        """The communities of `platform` where `user` has an agent (for a process that sees
        only some of the bot's communities: a Discord shard)."""
        async with self.sessions() as session:
            found = await session.scalars(
                select(Tenant.key)
                .join(User, User.tenant_id == Tenant.id)
                .where(Tenant.key.startswith(f"{platform}:"), User.external_id == user)
                .order_by(Tenant.key)
            )
            return list(found)

    async def resolve(
        self,
        platform: str,
        user: str,
        served: Sequence[str],
        configured: str | None,
        keep: bool = True,
    ) -> str:
        """The tenant of this user's DMs: the recorded home, else one picked and, with
        `keep` (a message arrived, not just a question about memory), recorded."""
        async with self.sessions() as session, session.begin():
            home = await recorded(session, platform, user)
            if home is None and not keep:
                return (await pick(session, platform, user, served, configured)).tenant
            if home is None:
                picked = await pick(session, platform, user, served, configured)
                await record(session, platform, user, picked, self.config, self.clock(), False)
                home = await recorded(session, platform, user)
            assert home is not None
            return home.tenant

    async def choose(self, platform: str, user: str, tenant: str) -> None:
        """The member moves their DMs to `tenant`'s memory (their agent there)."""
        async with self.sessions() as session, session.begin():
            home = Home(tenant, "member")
            await record(session, platform, user, home, self.config, self.clock(), True)
