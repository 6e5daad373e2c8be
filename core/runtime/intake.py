"""Storing what a platform sent: the one write a platform's acknowledgement waits for.

take(...)          a member's message stored for their agent (made the first time) in
                   one transaction, the admins' rules (`admit`) asked first in it: one
                   round of the pool and as few round trips as the work allows, since
                   Slack resends what is not acknowledged within 3 s
insert_event(...)  the event's row, deduplicated by its key (per agent)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import ensure_agent, erased_after
from core.events import EventStatus, InboundEvent
from core.members.admission import Admitted
from core.models import Event
from core.runtime.handling import agent_events
from core.scope import Scope, enter_scope

log = logging.getLogger(__name__)
ADMITTED = Admitted(True)
Admit = Callable[[AsyncSession], Awaitable[Admitted]]  # the admins' rules, in a transaction


@dataclass(frozen=True)
class Taken:
    """What `take` did with a platform's message: stored (`scope`, `event_id`), or not, as
    the admins' rules say (`admitted`, with what to tell the member)."""

    admitted: Admitted
    scope: Scope | None = None
    event_id: int | None = None


async def take(
    sessions: async_sessionmaker[AsyncSession],
    config: EngineConfig,
    now: datetime,
    tenant: str,
    user: str,
    event: InboundEvent,
    hold: bool = False,
    admit: Admit | None = None,
    display_name: str | None = None,
) -> Taken:
    """`hold`: as for `Engine.submit` (a message whose files are still being fetched)."""
    payload = event.payload()  # too large: refused before anything is written
    async with sessions() as session, session.begin():
        verdict = await admit(session) if admit is not None else ADMITTED
        if not verdict.answer:
            return Taken(verdict)
        written = event.written_at
        if written is not None and await erased_after(session, tenant, user, written):
            log.info("a message written before its member was erased is not taken")
            return Taken(Admitted(False))
        scope = await ensure_agent(session, tenant, user, config, display_name)
        await enter_scope(session, scope)
        event_id, _ = await insert_event(session, scope, event, now, hold, payload)
    return Taken(verdict, scope, event_id)


async def insert_event(
    session: AsyncSession,
    scope: Scope,
    event: InboundEvent,
    now: datetime,
    hold: bool = False,
    payload: dict[str, Any] | None = None,
) -> tuple[int, bool]:
    """(event id, whether it is new); a redelivery gets the first delivery's id."""
    values = {
        "tenant_id": scope.tenant_id,
        "agent_id": scope.agent_id,
        "kind": str(event.kind),
        "payload": payload if payload is not None else event.payload(),
        "dedup_key": event.dedup_key,
        "status": EventStatus.WAITING if hold else EventStatus.PENDING,
        "created_at": now,
    }
    # Keys per agent (migrations 0008, 0017): another member's same platform id is theirs.
    new_id = await session.scalar(
        insert(Event)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[Event.tenant_id, Event.agent_id, Event.dedup_key])
        .returning(Event.id)
    )
    if new_id is not None:
        return int(new_id), True
    existing = await session.scalar(
        select(Event.id).where(agent_events(scope), Event.dedup_key == event.dedup_key)
    )
    if existing is None:  # the key's row exists but is not this agent's: cannot happen
        raise RuntimeError(f"event key {event.dedup_key!r} of agent {scope.agent_id} vanished")
    return int(existing), False
