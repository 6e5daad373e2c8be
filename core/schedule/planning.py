"""Scheduled interrupts in Postgres: planning and claiming.

    after_event(agent, tenant, user, ...)  after every event: when is this agent's next opener
    replan(session, agent, config)         the same, for a settings change outside a turn
    claim_due(session, now, config)        take due agents (FOR UPDATE SKIP LOCKED) and store a
                                           scheduled-interrupt event for each

One scheduler pass that also runs the claimed agents is `core.runtime.tick`.

What is due lives in the agents table, so several processes never open the same
conversation twice (the claim skips rows another process holds, and the event's dedup key
names the agent and the due time) and a restart loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import ScheduleConfig
from core.directory import member_of
from core.events import EventKind, InboundEvent, Purpose
from core.models import Agent, Event, Tenant, User
from core.schedule.policy import (
    OpenerHistory,
    Plan,
    catch_up,
    jitter_for,
    next_opener,
    policy_for,
)
from core.scope import Scope

OPENER = (
    "conversation opener: it is {local} for the person ({zone}); they last wrote {ago}. If "
    "something in your working context gives you a natural, kind reason to reach out (a plan "
    "they mentioned, something they care about, how a thing went), send them one short "
    "message with send_message, in your own voice. If nothing does, stay silent: do not "
    "call send_message."
)
UPKEEP = (
    "memory upkeep: the person is away. Tidy your memory: merge duplicate facts in working "
    "context, fix what is outdated, move long details to archival memory. Do not message "
    "the person; you have a few steps."
)


@dataclass
class Claims:
    """What one pass claimed, and the long-overdue openers it moved instead of sending."""

    claimed: list[Claim] = field(default_factory=list)
    respread: list[datetime] = field(default_factory=list)  # their new times


@dataclass(frozen=True)
class Claim:
    scope: Scope
    event_id: int
    tenant: str
    user: str
    purpose: Purpose


def _ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "never"
    hours = (now - then).total_seconds() / 3600
    return f"{hours / 24:.0f} days ago" if hours >= 36 else f"{hours:.0f} hours ago"


def plan_with(agent: Agent, tenant: Tenant, user: User, config: ScheduleConfig) -> Plan:
    policy = policy_for(config.openers, tenant.settings or {}, user.settings or {}, user.timezone)
    history = OpenerHistory(agent.last_active_at, agent.last_opener_at, agent.openers_unanswered)
    return next_opener(policy, history, jitter_for(agent.id, agent.last_active_at))


async def plan_for(session: AsyncSession, agent: Agent, config: ScheduleConfig) -> Plan:
    return plan_with(agent, *await member_of(session, agent), config)


async def replan(session: AsyncSession, agent: Agent, config: ScheduleConfig) -> Plan:
    plan = await plan_for(session, agent, config)
    agent.next_opener_at = plan.at
    return plan


def after_event(
    agent: Agent,
    tenant: Tenant,
    user: User,
    kind: str,
    purpose: Purpose | None,
    replied: bool,
    now: datetime,
    config: ScheduleConfig,
) -> None:
    """Keep the schedule true after an event: the member wrote, or an opener went out."""
    if kind == EventKind.USER_MESSAGE:
        agent.last_active_at = now
        agent.openers_unanswered = 0
        if (tenant.settings or {}).get("upkeep", config.upkeep):
            agent.next_upkeep_at = now + config.upkeep_idle
    elif purpose is Purpose.OPENER and replied:
        agent.last_opener_at = now
        agent.openers_unanswered += 1
    agent.next_opener_at = plan_with(agent, tenant, user, config).at


async def _claim(
    session: AsyncSession,
    agent: Agent,
    tenant: Tenant,
    user: User,
    purpose: Purpose,
    text: str,
    key: str,
    now: datetime,
) -> Claim | None:
    """Store the scheduled event; None when this exact interrupt was already stored."""
    event = InboundEvent(EventKind.SCHEDULED, text, key, {"purpose": purpose})
    event_id = await session.scalar(
        insert(Event)
        .values(
            tenant_id=agent.tenant_id,
            agent_id=agent.id,
            kind=str(event.kind),
            payload=event.payload(),
            dedup_key=key,
            created_at=now,
        )
        .on_conflict_do_nothing()
        .returning(Event.id)
    )
    if event_id is None:
        return None
    return Claim(Scope(agent.tenant_id, agent.id), event_id, tenant.key, user.external_id, purpose)


async def _due(
    session: AsyncSession, column: Any, now: datetime, batch: int
) -> list[tuple[Agent, Tenant, User]]:
    """Agents whose `column` time has come, locked; rows another process holds are skipped.
    A community the platform removed the bot from waits (core.tenants.tenancy)."""
    departed = select(Tenant.id).where(Tenant.departed_at.is_not(None))
    agents = await session.scalars(
        select(Agent)
        .where(column <= now, Agent.tenant_id.not_in(departed))
        .order_by(column)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )
    return [(agent, *await member_of(session, agent)) for agent in list(agents)]


async def _claim_opener(
    session: AsyncSession,
    agent: Agent,
    tenant: Tenant,
    user: User,
    now: datetime,
    config: ScheduleConfig,
    respread: list[datetime],
) -> Claim | None:
    due = agent.next_opener_at
    assert due is not None
    plan = plan_with(agent, tenant, user, config)  # settings may have changed since
    if plan.at is None or plan.at > now:
        agent.next_opener_at = plan.at
        return None
    policy = policy_for(config.openers, tenant.settings or {}, user.settings or {}, user.timezone)
    later = catch_up(due, now, policy, config.catch_up_spread, jitter_for(agent.id, now.date()))
    if later is not None:  # long overdue (the bot was down): spread out, no burst
        agent.next_opener_at = later
        respread.append(later)
        return None
    agent.next_opener_at = None  # replanned once the opener has run
    local = now.astimezone(ZoneInfo(user.timezone)).strftime("%A %d %B %H:%M")
    text = OPENER.format(local=local, zone=user.timezone, ago=_ago(agent.last_active_at, now))
    return await _claim(
        session,
        agent,
        tenant,
        user,
        Purpose.OPENER,
        text,
        f"opener:{agent.id}:{due.isoformat()}",
        now,
    )


async def claim_due(session: AsyncSession, now: datetime, config: ScheduleConfig) -> Claims:
    """Claim due openers and upkeep; each claimed agent gets one scheduled event."""
    found = Claims()
    claims: list[Claim | None] = []
    for agent, tenant, user in await _due(session, Agent.next_opener_at, now, config.batch):
        claims.append(
            await _claim_opener(session, agent, tenant, user, now, config, found.respread)
        )
    for agent, tenant, user in await _due(session, Agent.next_upkeep_at, now, config.batch):
        key = f"upkeep:{agent.id}:{agent.next_upkeep_at.isoformat()}"  # type: ignore[union-attr]
        agent.next_upkeep_at = None
        claims.append(await _claim(session, agent, tenant, user, Purpose.UPKEEP, UPKEEP, key, now))
    found.claimed = [claim for claim in claims if claim is not None]
    return found
