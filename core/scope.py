"""Whose memory a transaction works on, and the database's wall around it.

`Scope` (tenant id, agent id) names one member's agent; every member-scoped query filters
on both. `enter_scope` is the second wall: for the rest of the transaction, row-level
security (migrations 0006, 0009, 0030) shows and accepts only that member's rows, even to a
query that forgot its filter. The policies bind the connection's own role, so `RESET ROLE`
or a shadowing search_path widens nothing, and a transaction cannot enter a second member.
The member is in the settings `companion.tenant_id` and `companion.agent_id`, which any SQL
could `set_config`; where the database has the wall's record (`bot/wall.py`: always on the
embedded server), the member is also recorded where the app's role cannot write, every
statement checks the settings against it, and DDL and TRUNCATE are refused, so no SQL run
in the transaction reaches another member. Without it, the wall guards against query bugs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True)
class Scope:
    tenant_id: int
    agent_id: int


async def enter_scope(session: AsyncSession, scope: Scope) -> None:
    """For the rest of this transaction, the database shows only this member's rows."""
    await session.execute(
        text("SELECT companion_enter(:tenant, :agent)"),
        {"tenant": scope.tenant_id, "agent": scope.agent_id},
    )
