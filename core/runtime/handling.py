"""What one event comes to, inside its agent's claim (`Engine.drain` holds it).

    Handler(mind, clock).handle(session, store, agent, event, pause)
        -> (TurnResult, the main context a completed turn left, or None)

Over a rate limit or budget: a short answer without a model call. Otherwise the turn runs;
a failure drops what its last step had not saved, keeps the member's message and becomes
an apology. A model that is down (`ModelUnavailable`, `ModelTimeout`) is not a failure: the
event stays pending, marked `DEFERRED`, and the member hears `WAITING_NOTICE` once per
outage; an event that waited longer than `EngineConfig.outage_wait` is given up, its member
told (`UNANSWERED_REPLY`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import within_ceilings
from core.errors import AgentErased, ClaimLost, ModelError, ModelTimeout, ModelUnavailable
from core.events import DEFERRED, EventKind, EventStatus, purpose_of, trigger_fields
from core.memory.mind import Mind, TurnResult
from core.memory.store import AgentStore
from core.memory.turn import Turn
from core.memory.window import MainContext
from core.models import Agent, Event
from core.ports import Counter, Timer
from core.runtime.apologies import UNANSWERED_REPLY, WAITING_NOTICE, apology
from core.runtime.budgets import over_limit
from core.runtime.presence import Checkpoint
from core.schedule.planning import after_event
from core.scope import Scope

log = logging.getLogger("core.runtime.engine")  # the engine's log, as operators know it

UNANSWERED = "unanswered: the model was down for too long"


def waits_for_model(error: str | None) -> bool:
    """Does an event's `error` say it waits for a model that is down?"""
    return (error or "").startswith(DEFERRED)


def _waited_too_long(event: Event, now: datetime, limit: timedelta) -> bool:
    return waits_for_model(event.error) and now - event.created_at > limit


def _unanswered(event: Event) -> str:
    return UNANSWERED_REPLY.format(when=f"{event.created_at:%d %b %H:%M} UTC")


def agent_events(scope: Scope) -> Any:
    """The agent's own events."""
    return (Event.tenant_id == scope.tenant_id) & (Event.agent_id == scope.agent_id)


class Handler:
    def __init__(self, mind: Mind, clock: Callable[[], datetime]) -> None:
        self.mind = mind
        self.clock = clock

    async def handle(
        self,
        session: AsyncSession,
        store: AgentStore,
        agent: Agent,
        event: Event,
        pause: Checkpoint,
        spent: TurnResult | None = None,
    ) -> tuple[TurnResult, MainContext | None]:
        """Handle one event: (what came of it, the main context a completed turn left).
        A turn charges its model calls to `spent` when given (the caller's, so that it
        knows what was billed even when this raises)."""
        now, metrics, started = self.clock(), self.mind.metrics, time.perf_counter()
        context: MainContext | None = None
        assert store.member is not None, "drain locked the agent"
        assert store.member is not None, "drain locked the agent"
        limits = (store.member[0].settings or {}).get("limits")  # the community's own
        config = within_ceilings(self.mind.config, limits)
        limited = await over_limit(session, store.scope, event, now, config)
        if _waited_too_long(event, now, self.mind.config.outage_wait):
            result, status = TurnResult(event.id, error=UNANSWERED), EventStatus.FAILED
            replies = [_unanswered(event)] if event.kind == EventKind.USER_MESSAGE else []
        elif limited is not None:
            reason, reply = limited
            metrics.count(Counter.LIMITED, reason=reason)
            result = TurnResult(event.id, error=f"limited: {reason}")
            status = EventStatus.LIMITED
            replies = [reply] if event.kind == EventKind.USER_MESSAGE else []
            await store.append(
                now, event_id=event.id, **trigger_fields(event.kind, event.payload["text"])
            )
        else:
            result, status, replies, context = await self._think(
                session, store, agent, event, now, pause, spent
            )
            agent = store.agent or agent  # read again by each transaction of the turn
        if result.deferred:
            await self._wait_for_model(session, store.scope, event, now, result.error or "")
            metrics.count(Counter.EVENTS, kind=event.kind, status="deferred")
            return result, None
        tenant, user = store.member
        for text in replies:  # the turn saved its own replies; these are the engine's
            await store.add_outbox(text, event.id, now)
        event.status, event.error, event.processed_at = status, result.error, now
        purpose = purpose_of(event.payload)
        store.seal()  # with the schedule's changes to the row, in one UPDATE
        after_event(
            agent,
            tenant,
            user,
            event.kind,
            purpose,
            status == EventStatus.DONE and bool(result.replies),
            now,
            self.mind.config.schedule,
        )
        metrics.count(Counter.EVENTS, kind=event.kind, status=status)
        metrics.observe(Timer.TURN, time.perf_counter() - started)
        if status != EventStatus.DONE:
            result.replies = replies
        return result, context

    async def _think(
        self,
        session: AsyncSession,
        store: AgentStore,
        agent: Agent,
        event: Event,
        now: datetime,
        pause: Checkpoint,
        spent: TurnResult | None,
    ) -> tuple[TurnResult, EventStatus, list[str], MainContext | None]:
        """Run the turn; a failure drops what its last step had not saved, keeps the member's
        message (and what earlier steps saved) and becomes an apology."""
        assert store.member is not None
        user = store.member[1]
        turn = Turn(
            self.mind, store, agent, event, now, user.timezone, user.display_name, pause, spent
        )
        deferred = False
        event_id = event.id  # read now: after a failed statement the row cannot be read
        try:
            return await turn.run(), EventStatus.DONE, [], turn.context
        except (ClaimLost, AgentErased):
            raise
        except (ModelUnavailable, ModelTimeout) as error:
            log.warning(
                "event %s of agent %s waits for the model: %s",
                event_id,
                store.scope.agent_id,
                error,
            )
            reply, problem, deferred = "", f"{DEFERRED}{error}", True
        except ModelError as error:
            log.warning("event %s of agent %s: %s", event_id, store.scope.agent_id, error)
            self.mind.metrics.count(Counter.ERRORS, kind="model")
            reply, problem = apology(error), str(error)
        except Exception as error:
            log.exception("event %s of agent %s failed", event_id, store.scope.agent_id)
            self.mind.metrics.count(Counter.ERRORS, kind="internal")
            reply, problem = apology(error), f"{type(error).__name__}: {error}"

        await session.rollback()  # what the turn did since its last save
        turn.rolled_back()
        await pause.resume()
        for row in (event, *store.member):
            await session.refresh(row)
        await turn.save_usage()  # the calls were made, whatever became of them
        if turn.context.newest is None:  # failed before the member's words were stored
            await store.append(
                now, event_id=event.id, **trigger_fields(event.kind, event.payload["text"])
            )
        spent = turn.result
        failed = TurnResult(
            event.id,
            error=problem,
            tokens=spent.tokens,
            model_calls=spent.model_calls,
            calls=spent.calls,
        )
        failed.steps = spent.steps
        if deferred:
            failed.deferred = True
            return failed, EventStatus.PENDING, [], None
        replies = [reply] if event.kind == EventKind.USER_MESSAGE else []
        return failed, EventStatus.FAILED, replies, None

    async def _wait_for_model(
        self, session: AsyncSession, scope: Scope, event: Event, now: datetime, why: str
    ) -> None:
        """The model is down: the agent's pending events wait for it, marked so; the member
        hears it once per outage, on the newest message they are waiting on."""
        pending = list(
            await session.scalars(
                select(Event)
                .where(agent_events(scope), Event.status == EventStatus.PENDING)
                .order_by(Event.id)
                .with_for_update()
            )
        )
        messages = [e for e in pending if e.kind == EventKind.USER_MESSAGE]
        told = any(waits_for_model(e.error) for e in messages)
        for waiting in pending:
            waiting.error = why
        if messages and not told:
            store = AgentStore(session, scope, self.mind.config.max_message_tokens)
            await store.add_outbox(WAITING_NOTICE, messages[-1].id, now)
