"""Who is who: tenants, users and their one agent each.

`ensure_agent` creates what is missing (safe when several processes race) and gives back the
`Scope` every other query runs in. A fresh agent gets the `persona` block (its community's,
if its admins set one, else the default) and the `human` block.

Every erase goes through here, and ends the member's inspector sessions in the caller's
transaction, whichever front end asked (the inspector, Slack, Discord, the CLI): a browser
signed in before a forget or reset cannot read, or post a form that recreates, the member.
Each erase also leaves the time it happened in the community's settings (`ERASED`: the
member's platform id and the time, no words, for ERASED_DAYS): a message written before it
that a platform sends again, or a channel's read-back after a restart finds, is not taken
(`core.runtime.intake`), so nothing erased comes back.

    erase_member(session, tenant, user, now)   forget: the user row and all it owns
    reset_agent(session, tenant, user, now)    reset: the agent and all it owns, a fresh agent
    erased_after(session, tenant, user, written)
                                          whether the member was erased after `written`
    end_sessions(session, tenant, user)   every inspector session of the member (None: of
                                          everyone in the tenant)
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from core.companion import profile_of
from core.config import EngineConfig
from core.models import Agent, Block, Tenant, User, WebSession
from core.scope import Scope

ERASED = "erased"  # tenants.settings: {member's platform id: when they were erased, ISO}
# As long as a platform may still bring back what was written before an erase: a read-back
# reaches 7 days into a channel's past, a Slack retry minutes.
ERASED_DAYS = 8


async def _upsert_id(session: AsyncSession, model: type, values: dict, keys: list[str]) -> int:
    await session.execute(insert(model).values(**values).on_conflict_do_nothing())
    where = [getattr(model, k) == values[k] for k in keys]
    found = await session.scalar(select(model.id).where(*where))  # type: ignore[attr-defined]
    assert found is not None
    return int(found)


async def ensure_agent(
    session: AsyncSession,
    tenant: str,
    user: str,
    config: EngineConfig,
    display_name: str | None = None,
) -> Scope:
    """The member's agent, created with its tenant, user and blocks the first time."""
    known = await find_agent(session, tenant, user)  # nearly always: one round trip
    if known is not None:
        return known
    tenant_id = await _upsert_id(session, Tenant, {"key": tenant}, ["key"])
    user_id = await _upsert_id(
        session,
        User,
        {"tenant_id": tenant_id, "external_id": user, "display_name": display_name},
        ["tenant_id", "external_id"],
    )
    agent_id = await session.scalar(select(Agent.id).where(Agent.user_id == user_id))
    if agent_id is None:
        settings = await session.scalar(select(Tenant.settings).where(Tenant.id == tenant_id))
        persona = profile_of(settings).persona or config.default_persona
        agent_id = await _upsert_id(
            session, Agent, {"tenant_id": tenant_id, "user_id": user_id}, ["user_id"]
        )
        await session.execute(
            insert(Block)
            .values(
                [
                    {
                        "tenant_id": tenant_id,
                        "agent_id": agent_id,
                        "label": label,
                        "value": value,
                        "char_limit": limit,
                    }
                    for label, value, limit in (
                        ("persona", persona, config.persona_limit),
                        ("human", config.default_human, config.human_limit),
                    )
                ]
            )
            .on_conflict_do_nothing()
        )
    return Scope(tenant_id, int(agent_id))


async def find_user(
    session: AsyncSession, tenant: str, user: str, lock: bool = False
) -> User | None:
    """The member row of platform user `user` in community `tenant`, if there is one.

    With `lock`, the row is locked for the transaction and read as it is now: what changes
    the member's settings holds it, so two changes at once never write over each other."""
    query = (
        select(User)
        .join(Tenant, Tenant.id == User.tenant_id)
        .where(Tenant.key == tenant, User.external_id == user)
    )
    if lock:
        query = query.with_for_update(of=User).execution_options(populate_existing=True)
    return await session.scalar(query)


async def lock_tenant(session: AsyncSession, tenant: str) -> Tenant | None:
    """The community's row, locked for the transaction and read as it is now (see
    `find_user`)."""
    return await session.scalar(
        select(Tenant)
        .where(Tenant.key == tenant)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def find_agent(session: AsyncSession, tenant: str, user: str) -> Scope | None:
    row = (
        await session.execute(
            select(Agent.tenant_id, Agent.id)
            .join(User, User.id == Agent.user_id)
            .join(Tenant, Tenant.id == User.tenant_id)
            .where(Tenant.key == tenant, User.external_id == user)
        )
    ).first()
    return Scope(row[0], row[1]) if row else None


async def reset_agent(
    session: AsyncSession, tenant: str, user: str, config: EngineConfig, now: datetime
) -> Scope | None:
    """Erase a member's memory and give them a fresh agent; None if there was none.

    The member's own settings (time zone, openers, quiet hours) are not memory and stay.
    """
    scope = await find_agent(session, tenant, user)
    if scope is None:
        return None
    await delete_agent(session, scope)
    await end_sessions(session, tenant, user)
    await _erased(session, tenant, user, now)
    return await ensure_agent(session, tenant, user, config)


async def erase_member(session: AsyncSession, tenant: str, user: str, now: datetime) -> bool:
    """Erase the member: their agent, all its memory, their settings and their sessions."""
    member = await find_user(session, tenant, user)
    if member is None:
        await end_sessions(session, tenant, user)  # a session may outlive its member row
        return False
    await session.execute(delete(User).where(User.id == member.id))
    await end_sessions(session, tenant, user)
    await _erased(session, tenant, user, now)
    return True


async def _erased(session: AsyncSession, tenant: str, user: str, now: datetime) -> None:
    """Note the erase in the community's settings; notes older than ERASED_DAYS go."""
    row = await lock_tenant(session, tenant)
    if row is None:
        return
    settings = dict(row.settings or {})
    since = now - timedelta(days=ERASED_DAYS)
    kept = {
        who: when
        for who, when in (settings.get(ERASED) or {}).items()
        if datetime.fromisoformat(when) > since
    }
    row.settings = {**settings, ERASED: {**kept, user: now.isoformat()}}


async def erased_after(session: AsyncSession, tenant: str, user: str, written: datetime) -> bool:
    """Whether the member was erased after `written` (their message is from before it)."""
    when = await session.scalar(
        select(Tenant.settings[ERASED][user].astext).where(Tenant.key == tenant)
    )
    return when is not None and datetime.fromisoformat(when) > written


async def end_sessions(session: AsyncSession, tenant: str, user: str | None) -> None:
    """End the member's inspector sessions (with `user` None: every session of the tenant).

    Their links stay spent (`spent_links`): ending a session never lets a link in again.
    """
    which = WebSession.tenant == tenant
    if user is not None:
        which = which & (WebSession.member == user)
    await session.execute(delete(WebSession).where(which))


async def delete_agent(session: AsyncSession, scope: Scope) -> None:
    """Erase the agent and everything it owns (the database cascades to every table)."""
    await session.execute(
        delete(Agent).where(Agent.id == scope.agent_id, Agent.tenant_id == scope.tenant_id)
    )


async def member_of(session: AsyncSession, agent: Agent) -> tuple[Tenant, User]:
    """The tenant and user an agent belongs to."""
    row = (
        await session.execute(
            select(Tenant, User)
            .join(User, User.tenant_id == Tenant.id)
            .where(User.id == agent.user_id, Tenant.id == agent.tenant_id)
        )
    ).one()
    return row[0], row[1]
