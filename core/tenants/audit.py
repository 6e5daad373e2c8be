"""The audit log: every admin or operator action on member data, naming who did it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import AuditEntry, Tenant


async def record(
    session: AsyncSession,
    tenant: str,
    actor: str,
    action: str,
    target: str | None,
    detail: dict[str, Any],
    now: datetime,
) -> None:
    """Add an entry in the caller's transaction: it commits, or rolls back, with the action.

    Call it before `enter_scope`: the member's role may not write the audit log.
    """
    await session.execute(insert(Tenant).values(key=tenant, settings={}).on_conflict_do_nothing())
    tenant_id = await session.scalar(select(Tenant.id).where(Tenant.key == tenant))
    session.add(
        AuditEntry(
            tenant_id=tenant_id,
            actor=actor,
            action=action,
            target=target,
            detail=detail,
            created_at=now,
        )
    )
    await session.flush()
