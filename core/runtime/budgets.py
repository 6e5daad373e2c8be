"""Budgets: how often a member may write, and how much a tenant and a member may spend per
UTC day, in tokens or in dollars (at the model's price, cached input at its own rate).
Checked before a turn (no model call when over), recorded after it.

A limited event is still stored and its message still goes to recall storage: nothing is
lost, the member just gets a polite answer instead of a model call.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import EngineConfig
from core.events import EventKind
from core.models import Event, Usage
from core.prices import Price, Spent
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


async def spent(session: AsyncSession, whose: Any, day: date) -> Spent:
    """What the usage rows matching `whose` (a condition) add up to on `day`."""
    row = (
        await session.execute(
            select(
                func.coalesce(func.sum(Usage.tokens), 0),
                func.coalesce(func.sum(Usage.cached_tokens), 0),
                func.coalesce(func.sum(Usage.completion_tokens), 0),
            ).where(whose, Usage.day == day)
        )
    ).one()
    return Spent(int(row[0]), int(row[1]), int(row[2]))


def _over(spend: Spent, tokens: int | None, usd: float | None, price: Price | None) -> bool:
    if tokens and spend.tokens >= tokens:
        return True
    return bool(usd and price and spend.cost(price) >= usd)


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
    return await over_budget(session, scope, now.date(), config)


async def over_budget(
    session: AsyncSession, scope: Scope, today: date, config: EngineConfig
) -> tuple[str, str] | None:
    """("budget", reply) when the member or their community spent today's budget."""
    price = config.price
    if config.member_daily_tokens or config.member_daily_usd:
        mine = await spent(session, Usage.agent_id == scope.agent_id, today)
        if _over(mine, config.member_daily_tokens, config.member_daily_usd, price):
            return "budget", BUDGET_REPLY.format(whose=" for our chats")
    if config.tenant_daily_tokens or config.tenant_daily_usd:
        theirs = await spent(session, Usage.tenant_id == scope.tenant_id, today)
        if _over(theirs, config.tenant_daily_tokens, config.tenant_daily_usd, price):
            return "budget", BUDGET_REPLY.format(whose=" for this community")
    return None
