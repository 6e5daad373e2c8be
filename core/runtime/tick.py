"""One scheduler pass: claim what is due, let each claimed agent think, deliver openers.

    tick(engine, now) -> TickReport    openers go out through `engine.platforms`
    preview(sessions, schedule, now)   what a pass at `now` would claim; nothing changes (the
                                       database alone: no engine is needed to ask)

The claims themselves (what is due, locked with SKIP LOCKED, one scheduled event each) are
`core.schedule.planning.claim_due`; this module drives the engine with them, so it sits
above it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import ScheduleConfig
from core.errors import NoPlatform
from core.events import Purpose
from core.schedule.planning import Claim, Claims, claim_due

if TYPE_CHECKING:
    from core.runtime.engine import Engine

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    claimed: list[Claim] = field(default_factory=list)
    respread: list[datetime] = field(default_factory=list)  # long overdue: moved, not sent
    sent: int = 0
    silent: int = 0
    undelivered: int = 0
    waiting: int = 0  # openers that met a model that is down: they run once it is back


async def tick(engine: Engine, now: datetime) -> TickReport:
    """One scheduler pass at `now`: claim what is due, run each agent, deliver openers.

    Openers go as direct messages on the member's platform (`engine.platforms`), after the
    member's earlier replies that still wait; where no platform served here reaches the
    member (or sending fails), an opener waits in the outbox and shows at their next chat.
    """
    async with engine.sessions() as session, session.begin():
        found = await claim_due(session, now, engine.mind.config.schedule)
    report = TickReport(found.claimed, found.respread)
    # The claimed agents think side by side: the model's own bound on calls in flight
    # (COMPANION_MODEL_CONCURRENCY) and the engine's share of the pool hold them, as they
    # hold members' turns; one slow opener no longer delays the rest.
    outcomes = await asyncio.gather(*(_run(engine, claim) for claim in found.claimed))
    for outcome in outcomes:
        if outcome is not None:
            setattr(report, outcome, getattr(report, outcome) + 1)
    return report


async def _run(engine: Engine, claim: Claim) -> str | None:
    """One claimed agent's scheduled event, handled; for an opener, what became of it:
    "sent", "silent" (the agent chose to say nothing), "undelivered" or "waiting" (for the
    model)."""
    handled = await engine.see_through(claim.scope, claim.event_id)
    if claim.purpose is not Purpose.OPENER:
        return None
    result = handled.get(claim.event_id)
    if result is not None and result.deferred:  # not run: the model is down
        return "waiting"
    if not await engine.outbox.undelivered(claim.event_id):
        return "silent"
    sent = await _deliver(engine, claim, claim.event_id in handled)
    return "sent" if sent else "undelivered"


async def preview(
    sessions: async_sessionmaker[AsyncSession], schedule: ScheduleConfig, now: datetime
) -> Claims:
    """What a pass at `now` would claim and re-spread, found by claiming in a transaction
    that is rolled back: the same rules as `tick`, no model call, the schedule unchanged."""
    async with sessions() as session:
        transaction = await session.begin()
        try:
            return await claim_due(session, now, schedule)
        finally:
            await transaction.rollback()


async def _deliver(engine: Engine, claim: Claim, fresh: bool) -> bool:
    try:
        route = engine.platforms.direct(claim.tenant, claim.user)
        await engine.outbox.deliver(claim.scope, claim.event_id, route, fresh)
    except NoPlatform:  # e.g. the terminal: it waits for the member's next chat
        return False
    except Exception:
        log.exception("opener for agent %s could not be delivered", claim.scope.agent_id)
        return False
    return True
