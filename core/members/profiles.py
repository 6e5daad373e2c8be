"""A community's companion as its admins set it: name, persona and instructions.

    get(tenant)                      the profile, and how many members have an agent
    change(tenant, actor, ...)       held to its limits (`BadSetting`), audited; with
                                     `replace_personas`, every existing member's `persona`
                                     block becomes the new one too (else they keep theirs)

New members' agents start from the profile's persona (`core.directory.ensure_agent`); every
member's next turn reads the name and instructions (`core.memory.turn`). Nothing here
reads a member's memory: the profile is the admins' text only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.companion import SETTINGS_KEY, CompanionProfile, checked, profile_of
from core.config import EngineConfig
from core.models import Agent, Block, Tenant
from core.tenants.audit import record


class Profiles:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions, self.config, self.clock = sessions, config, clock

    async def get(self, tenant: str) -> tuple[CompanionProfile, int]:
        """The tenant's profile and how many members have an agent there."""
        async with self.sessions() as session:
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            if row is None:
                return CompanionProfile(), 0
            agents = await session.scalar(
                select(func.count()).select_from(Agent).where(Agent.tenant_id == row.id)
            )
            return profile_of(row.settings), int(agents or 0)

    async def change(
        self,
        tenant: str,
        actor: str,
        *,
        name: str | None = None,
        persona: str | None = None,
        instructions: str | None = None,
        replace_personas: bool = False,
    ) -> tuple[CompanionProfile, int]:
        """Save what is given (None: unchanged); (the profile, members whose persona was
        replaced). Refused whole, with `BadSetting`, when any part is over its limit."""
        async with self.sessions() as session, session.begin():
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            before = profile_of(row.settings if row else None)
            wanted = checked(
                before.name if name is None else name,
                before.persona if persona is None else persona,
                before.instructions if instructions is None else instructions,
                self.config.persona_limit,
            )
            changed = {k: v for k, v in wanted.stored.items() if before.stored[k] != v}
            detail: dict[str, object] = dict(changed)
            if replace_personas:
                detail["replace_personas"] = True
            await record(session, tenant, actor, "companion", None, detail, self.clock())
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            assert row is not None  # the audit entry made sure of it
            row.settings = {**(row.settings or {}), SETTINGS_KEY: wanted.stored}
            replaced = 0
            if replace_personas:
                replaced = await _replace_personas(
                    session, row.id, wanted.persona or self.config.default_persona
                )
            return wanted, replaced


async def _replace_personas(session: AsyncSession, tenant_id: int, persona: str) -> int:
    """Every member's `persona` block of this tenant becomes `persona`; how many changed."""
    result = await session.execute(
        update(Block)
        .where(Block.tenant_id == tenant_id, Block.label == "persona", Block.value != persona)
        .values(value=persona)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
