"""One scheduler pass: claim what is due, let each claimed agent think, deliver openers.

    tick(engine, now, deliver) -> TickReport

The claims themselves (what is due, locked with SKIP LOCKED, one scheduled event each) are
`core.schedule.planning.claim_due`; this module drives the engine with them, so it sits
above it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from core.runtime.engine import Engine
from core.schedule.planning import Claim, claim_due

log = logging.getLogger(__name__)
Deliver = Callable[[str, str, str], Awaitable[None]]  # (tenant key, user id, text)


@dataclass
class TickReport:
    claimed: list[Claim] = field(default_factory=list)
    sent: int = 0
    silent: int = 0
    undelivered: int = 0


async def tick(engine: Engine, now: datetime, deliver: Deliver | None = None) -> TickReport:
    """One scheduler pass at `now`: claim what is due, run each agent, deliver openers.

    `deliver(tenant, user, text)` sends on the member's platform; without it (or when it
    fails) an opener waits in the outbox and is shown the next time the member chats.
    """
    async with engine.sessions() as session, session.begin():
        claims = await claim_due(session, now, engine.mind.config.schedule)
    report = TickReport(claims)
    for claim in claims:
        await engine.drain(claim.scope)
        if claim.purpose != "opener":
            continue
        waiting = await engine.outbox.undelivered(claim.event_id)
        if not waiting:
            report.silent += 1
            continue
        if deliver is None:
            report.undelivered += 1
            continue

        async def send(text: str, claim: Claim = claim) -> None:
            await deliver(claim.tenant, claim.user, text)

        try:
            await engine.outbox.deliver(claim.event_id, send)
            report.sent += 1
        except LookupError:  # no platform for this tenant: it waits for the member's next chat
            report.undelivered += 1
        except Exception:
            log.exception("opener for agent %s could not be delivered", claim.scope.agent_id)
            report.undelivered += 1
    return report
