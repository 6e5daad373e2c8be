"""A member's time zone taken from their platform profile (Slack has one), once.

`ProfileZones.adopt` runs before every Slack answer. It asks the database whether the
member's zone is settled (they set one, or it was taken from the profile already) and only
then the platform. The answer is remembered in this process for `RECHECK`, so a member who
keeps talking costs no query for it; a member erased and back within that time waits at most
that long for their zone to be taken again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import find_user
from core.errors import BadSetting
from core.models import Agent, User
from core.schedule.planning import replan

RECHECK = timedelta(minutes=10)


def parse_timezone(name: str) -> str:
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder, a huge name
        raise BadSetting(
            f"{name.strip()[:60]!r} is not a time zone; try e.g. Europe/Berlin"
        ) from None
    return name.strip()


class ProfileZones:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.clock = clock
        self._settled: dict[tuple[str, str], datetime] = {}  # member -> when it was seen so

    async def adopt(
        self, tenant: str, user: str, lookup: Callable[[], Awaitable[str | None]]
    ) -> None:
        """Take the zone `lookup()` gives (a profile's zone name, or None), unless the member
        has one already; `lookup` is only called when needed."""
        now = self.clock()
        seen = self._settled.get((tenant, user))
        if seen is not None and now - seen < RECHECK:
            return
        async with self.sessions() as session:
            member = await find_user(session, tenant, user)
            if member is None:
                return
            needed = not (member.settings or {}).get("timezone_from")
        if needed:
            zone = await lookup()  # the platform's API: no transaction open meanwhile
            async with self.sessions() as session, session.begin():
                member = await find_user(session, tenant, user, lock=True)
                if member is not None and not (member.settings or {}).get("timezone_from"):
                    await self._take(session, member, zone)
        self._settled[(tenant, user)] = now

    async def _take(self, session: AsyncSession, member: User, zone: str | None) -> None:
        try:
            member.timezone = parse_timezone(zone) if zone else member.timezone
        except BadSetting:
            pass  # an odd profile value: keep UTC
        member.settings = {**(member.settings or {}), "timezone_from": "platform"}
        agent = await session.scalar(select(Agent).where(Agent.user_id == member.id))
        if agent is not None:
            await replan(session, agent, self.config.schedule)
