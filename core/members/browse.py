"""Reading one member's memory page by page, for people rather than the model.

    recent_conversation(session, scope, before)   what was said, newest page first
    passage_page(session, scope, page)            archival passages with their source
    remove_passage(session, scope, passage_id)    delete one, only if it is this agent's
    opener_status(session, scope, config)         the next opener, why, and the last one

Every query filters on the scope's tenant and agent; `core.members.service.Members` calls
these inside the member's row-level wall and audits an admin's access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import ScheduleConfig
from core.memory import terms
from core.models import Agent, Message, Passage
from core.schedule.planning import plan_for
from core.scope import Scope

CONVERSATION_PAGE = 30
PASSAGE_PAGE = 20


@dataclass(frozen=True)
class Said:
    """One thing the member said, or was told."""

    id: int
    role: str  # user | assistant
    text: str
    created_at: datetime


@dataclass(frozen=True)
class Conversation:
    lines: list[Said]  # oldest first
    older: int | None  # pass as `before` for the page before this one; None: none is left


@dataclass(frozen=True)
class PassageRow:
    id: int
    text: str
    source: str  # "agent" (the model kept it), a file name, or "" when unknown
    created_at: datetime


@dataclass(frozen=True)
class Passages:
    rows: list[PassageRow]  # newest first
    page: int
    pages: int
    total: int


@dataclass(frozen=True)
class OpenerStatus:
    next_at: datetime | None  # UTC; None: no opener planned
    why: str
    last_at: datetime | None
    unanswered: int


def _mine(model: type[Message] | type[Passage], scope: Scope) -> object:
    return (model.tenant_id == scope.tenant_id) & (model.agent_id == scope.agent_id)


async def recent_conversation(
    session: AsyncSession, scope: Scope, before: int | None = None, limit: int = CONVERSATION_PAGE
) -> Conversation:
    query = (
        select(Message.id, Message.role, Message.search_text, Message.created_at)
        .where(_mine(Message, scope), Message.search_text.is_not(None))  # type: ignore[arg-type]
        .order_by(Message.id.desc())
        .limit(limit + 1)
    )
    if before is not None:
        query = query.where(Message.id < before)
    rows = (await session.execute(query)).all()
    lines = [Said(r.id, r.role, r.search_text or "", r.created_at) for r in rows[:limit]]
    older = lines[-1].id if len(rows) > limit else None
    return Conversation(lines[::-1], older)


async def passage_page(
    session: AsyncSession, scope: Scope, page: int = 1, size: int = PASSAGE_PAGE
) -> Passages:
    mine = _mine(Passage, scope)
    total = int(await session.scalar(select(func.count()).where(mine)) or 0)  # type: ignore[arg-type]
    pages = max(1, math.ceil(total / size))
    page = min(max(page, 1), pages)
    rows = await session.execute(
        select(Passage.id, Passage.text, Passage.source, Passage.created_at)
        .where(mine)  # type: ignore[arg-type]
        .order_by(Passage.id.desc())
        .limit(size)
        .offset((page - 1) * size)
    )
    found = [PassageRow(r.id, r.text, r.source or "", r.created_at) for r in rows]
    return Passages(found, page, pages, total)


async def remove_passage(session: AsyncSession, scope: Scope, passage_id: int) -> bool:
    """Delete the passage if it is this agent's; False when there is no such passage."""
    mine = _mine(Passage, scope)
    passage = delete(Passage).where(mine, Passage.id == passage_id)  # type: ignore[arg-type]
    deleted = await session.scalar(terms.counted_delete(passage))
    return deleted is not None


async def opener_status(
    session: AsyncSession, scope: Scope, config: ScheduleConfig
) -> OpenerStatus:
    agent = await session.scalar(
        select(Agent).where(Agent.id == scope.agent_id, Agent.tenant_id == scope.tenant_id)
    )
    assert agent is not None, f"agent {scope.agent_id} vanished"
    plan = await plan_for(session, agent, config)  # the why; the time is the one stored
    return OpenerStatus(
        agent.next_opener_at, plan.why, agent.last_opener_at, agent.openers_unanswered
    )
