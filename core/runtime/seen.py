"""What is already stored, and from where: for a platform that never sends an event twice.

Discord does not redeliver a message the bot missed (the process was down, or died between
receiving and storing it). What it offers instead is reading a channel back. These queries
say where to start reading and which of the messages read back are already stored.

    newest_per_channel(prefix, since)  per channel named in stored events' meta
                                       (`channel_id`, `message_id`): the newest message id,
                                       and the server it is in (`guild_id`; None: a DM), so
                                       a process reads back only its own servers' channels
    stored(key)                        whether a message with this dedup key was taken (in any
                                       state): Slack asks it of a thread's first message
    settled(keys)                      which of these dedup keys are stored already, not
                                       held for their files (a held one is worth reading again)
    held(prefix)                       messages still held for their files: after a restart,
                                       nobody is fetching them any more

Both look across every tenant whose key starts with the platform's prefix, as the
connection's own role (like `Engine.resume`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.events import EventStatus
from core.models import Event, Tenant
from core.scope import Scope


@dataclass(frozen=True)
class Newest:
    message_id: int  # the newest message stored from the channel
    guild_id: int | None  # the server the channel is in; None: a direct message


class Seen:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def newest_per_channel(self, tenant_prefix: str, since: datetime) -> dict[str, Newest]:
        meta = Event.payload["meta"]
        channel = meta["channel_id"].astext
        guild = func.max(meta["guild_id"].astext)  # one per channel
        newest = func.max(cast(meta["message_id"].astext, BigInteger))
        async with self.sessions() as session:
            rows = await session.execute(
                select(channel, newest, guild)
                .join(Tenant, Tenant.id == Event.tenant_id)
                .where(
                    Tenant.key.startswith(tenant_prefix, autoescape=True),
                    Event.created_at >= since,
                    channel.is_not(None),
                    meta["message_id"].astext.regexp_match("^[0-9]{1,19}$"),
                )
                .group_by(channel)
            )
            return {
                str(c): Newest(int(m), int(g) if g and g.isdigit() else None)
                for c, m, g in rows.all()
            }

    async def stored(self, key: str) -> bool:
        async with self.sessions() as session:
            found = await session.scalar(select(Event.id).where(Event.dedup_key == key).limit(1))
            return found is not None

    async def settled(self, keys: Collection[str]) -> set[str]:
        if not keys:
            return set()
        async with self.sessions() as session:
            found = await session.scalars(
                select(Event.dedup_key).where(
                    Event.dedup_key.in_(list(keys)), Event.status != EventStatus.WAITING
                )
            )
            return {key for key in found if key is not None}

    async def held(self, tenant_prefix: str) -> list[tuple[Scope, int, dict[str, Any]]]:
        """(scope, event id, meta) of each held message of the platform's tenants."""
        async with self.sessions() as session:
            rows = await session.execute(
                select(Event.tenant_id, Event.agent_id, Event.id, Event.payload)
                .join(Tenant, Tenant.id == Event.tenant_id)
                .where(
                    Tenant.key.startswith(tenant_prefix, autoescape=True),
                    Event.status == EventStatus.WAITING,
                )
                .order_by(Event.id)
            )
            return [(Scope(t, a), i, dict(p.get("meta") or {})) for t, a, i, p in rows.all()]
