"""What the model cost, per member and UTC day, for `companion usage`.

The usage rows are written by `core.runtime.budgets` (every model call, the summary calls
included); here they are read across tenants, as operator-wide work.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import Agent, Tenant, Usage, User
from core.prices import Spent


@dataclass(frozen=True)
class MemberDay:
    """What one member's agent spent on the model on one UTC day."""

    day: date
    tenant: str
    user: str
    calls: int
    spent: Spent


async def member_days(session: AsyncSession, since: date, tenant: str | None) -> list[MemberDay]:
    """Every member's usage from `since` on, sorted by day, tenant and member."""
    query = (
        select(Usage, Tenant.key, User.external_id)
        .join(Agent, Agent.id == Usage.agent_id)
        .join(User, User.id == Agent.user_id)
        .join(Tenant, Tenant.id == Usage.tenant_id)
        .where(Usage.day >= since)
        .order_by(Usage.day, Tenant.key, User.external_id)
    )
    if tenant is not None:
        query = query.where(Tenant.key == tenant)
    rows = (await session.execute(query)).all()
    return [
        MemberDay(
            row.day,
            key,
            user,
            row.calls,
            Spent(row.tokens, row.cached_tokens, row.completion_tokens),
        )
        for row, key, user in rows
    ]
