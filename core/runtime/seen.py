"""What is already stored, and from where: for a platform that does not send an event again.

A platform that does not redeliver a message the bot missed (the process was down, or died
between receiving and storing it) may offer instead to read a place back (a channel). These
queries say where to start reading and which of the messages read back are already stored.
Core knows no platform: the adapter names the keys of its events' meta (`Places`) and the
prefix of its tenants' keys.

    newest_per_place(prefix, since, keys)  per place named in stored events' meta: the
                                       newest position stored there (a whole number that
                                       grows with time) and the group holding the place (or
                                       None), so a process reads back only its own groups'
    stored(key)                        whether a message with this dedup key was taken (in any
                                       state), whoever's it is
    settled(keys)                      which of these dedup keys are stored already, not
                                       held for their files (a held one is worth reading again)
    held(prefix)                       messages still held for their files: after a restart,
                                       nobody is fetching them any more

They look across every tenant whose key starts with the platform's prefix, as the
connection's own role (like `Engine.resume`); the dedup key and held lookups are served by
their own indexes (migration 0030).
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

WHOLE_NUMBER = "^[0-9]{1,19}$"  # a position that fits a bigint; anything else is not read


@dataclass(frozen=True)
class Places:
    """The keys of a platform's event meta that say where a message was written."""

    place: str  # where (a channel)
    position: str  # the message's position there: a whole number that grows with time
    group: str  # what holds the place (a server); absent for a place of its own (a DM)


@dataclass(frozen=True)
class Newest:
    position: int  # the newest position stored from the place
    group: str | None  # the group holding the place, as stored; None: none


class Seen:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def newest_per_place(
        self, tenant_prefix: str, since: datetime, keys: Places
    ) -> dict[str, Newest]:
        meta = Event.payload["meta"]
        place = meta[keys.place].astext
        group = func.max(meta[keys.group].astext)  # one per place
        newest = func.max(cast(meta[keys.position].astext, BigInteger))
        async with self.sessions() as session:
            rows = await session.execute(
                select(place, newest, group)
                .join(Tenant, Tenant.id == Event.tenant_id)
                .where(
                    Tenant.key.startswith(tenant_prefix, autoescape=True),
                    Event.created_at >= since,
                    place.is_not(None),
                    meta[keys.position].astext.regexp_match(WHOLE_NUMBER),
                )
                .group_by(place)
            )
            return {str(p): Newest(int(n), g) for p, n, g in rows.all()}

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
