"""What is already stored, and from where: for a platform that never sends an event twice.

Discord does not redeliver a message the bot missed (the process was down, or died between
receiving and storing it). What it offers instead is reading a channel back. These queries
say where to start reading and which of the messages read back are already stored.

    newest_per_channel(prefix, since)  per channel named in stored events' meta
                                       (`channel_id`, `message_id`): the newest message id
    stored(keys)                       which of these dedup keys are stored already

Both look across every tenant whose key starts with the platform's prefix, as the
connection's own role (like `Engine.resume`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import BigInteger, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.models import Event, Tenant


class Seen:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def newest_per_channel(self, tenant_prefix: str, since: datetime) -> dict[str, int]:
        meta = Event.payload["meta"]
        channel = meta["channel_id"].astext
        newest = func.max(cast(meta["message_id"].astext, BigInteger))
        async with self.sessions() as session:
            rows = await session.execute(
                select(channel, newest)
                .join(Tenant, Tenant.id == Event.tenant_id)
                .where(
                    Tenant.key.startswith(tenant_prefix, autoescape=True),
                    Event.created_at >= since,
                    channel.is_not(None),
                    meta["message_id"].astext.regexp_match("^[0-9]{1,19}$"),
                )
                .group_by(channel)
            )
            return {str(c): int(m) for c, m in rows.all()}

    async def stored(self, keys: Collection[str]) -> set[str]:
        if not keys:
            return set()
        async with self.sessions() as session:
            found = await session.scalars(
                select(Event.dedup_key).where(Event.dedup_key.in_(list(keys)))
            )
            return {key for key in found if key is not None}
