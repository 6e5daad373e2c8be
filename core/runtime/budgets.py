"""Budgets: how often a member may write, and how many tokens a tenant and a member may
spend per UTC day. Checked before a turn (no model call when over), recorded after it.

A limited event is still stored and its message still goes to recall storage: nothing is
lost, the member just gets a polite answer instead of a model call.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import EngineConfig
from core.events import EventKind
from core.models import Event, Usage
from core.scope import Scope

RATE_REPLY = (
    "You're writing faster than I can keep up with ({limit} messages per {window}). I've "
    "saved your message; give me a little while and write again."
)
BUDGET_REPLY = (
    "I've used up today's thinking budget{whose}, so I can't answer properly right now. "
    "Your message is saved; I'll be back after midnight UTC."
)


def _window(config: EngineConfig) -> str:
    minutes = int(config.rate_window.total_seconds() // 60)
    return "hour" if minutes == 60 else "minute" if minutes == 1 else f"{minutes} minutes"


async def over_limit(
    session: AsyncSession, scope: Scope, event: Event, now: datetime, config: EngineConfig
) -> tuple[str, str] | None:
    """(reason, reply) when this event must not reach the model, else None."""
    if event.kind == EventKind.USER_MESSAGE and config.rate_limit:
        recent = await session.scalar(
            select(func.count()).where(
                Event.tenant_id == scope.tenant_id,
                Event.agent_id == scope.agent_id,
                Event.kind == EventKind.USER_MESSAGE,
                Event.created_at > now - config.rate_window,
                Event.id < event.id,
            )
        )
        if (recent or 0) >= config.rate_limit:
            return "rate", RATE_REPLY.format(limit=config.rate_limit, window=_window(config))
    today = now.date()
    if config.member_daily_tokens:
        spent = await session.scalar(
            select(Usage.tokens).where(Usage.agent_id == scope.agent_id, Usage.day == today)
        )
        if (spent or 0) >= config.member_daily_tokens:
            return "budget", BUDGET_REPLY.format(whose=" for our chats")
    if config.tenant_daily_tokens:
        spent = await session.scalar(
            select(func.sum(Usage.tokens)).where(
                Usage.tenant_id == scope.tenant_id, Usage.day == today
            )
        )
        if (spent or 0) >= config.tenant_daily_tokens:
            return "budget", BUDGET_REPLY.format(whose=" for this community")
    return None


async def record_usage(
    session: AsyncSession, scope: Scope, tokens: int, calls: int, now: datetime
) -> None:
    if not tokens and not calls:
        return
    statement = insert(Usage).values(
        agent_id=scope.agent_id,
        day=now.date(),
        tenant_id=scope.tenant_id,
        tokens=tokens,
        calls=calls,
    )
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[Usage.agent_id, Usage.day],
            set_={"tokens": Usage.tokens + tokens, "calls": Usage.calls + calls},
        )
    )
