"""Getting replies out: the outbox, where a turn's replies wait until they are delivered.

    deliver(scope, event_id, send, fresh)  send an event's replies through the channel of
                                  `scope`'s member, each locked while sent, marked after; a
                                  reply of any other agent is refused (logged, never sent).
                                  The member's earlier replies still waiting go first, back
                                  where each was asked (through `Platforms`)
    redeliver(older_than)         retry replies that did not go out (platform down, crash)
    undelivered(event_id)         what is still waiting for an event
    take_replies(event_id)        take an event's replies (the terminal shows them at once)
    take_waiting(scope)           take replies nobody took: openers for a member no platform
                                  reaches (a chat front end shows them), replies whose
                                  sender crashed

The engine owns one `Outbox` (`engine.outbox`), built with the engine's `Platforms`: the
routes to members outside a live handler, and which platforms this process reaches (only
their tenants' replies are retried here; the rest wait for a process that reaches them, or
for the member's next chat). Front ends deliver through it.

Seen once: a process killed after a post went out but before the reply was marked leaves a
reply that looks unsent. Every send is given a `Posting`: its `key` names the reply, and
`since` is set on every attempt but the first (the one right after the turn that wrote it),
meaning "an earlier attempt may have posted this since then". A platform that can tags each
post with the key and, when `since` is set, looks for its own tagged posts first and sends
only the parts not found (the adapters' one posting loop). Where it cannot look, the reply
goes out again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, false, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import NoPlatform
from core.events import EventKind
from core.models import Agent, Event, Reply, Tenant, User
from core.ports import Platforms, Posting, Send
from core.scope import Scope
from core.tenant_key import TenantKey

log = logging.getLogger(__name__)
MAX_DELIVERY_ATTEMPTS = 10


def _posting(reply: Reply, first: bool) -> Posting:
    """What a send of `reply` is told: after its first attempt, that it may be out already."""
    return Posting(f"r{reply.id}", None if first and reply.attempts == 0 else reply.created_at)


def _reached(platforms: Platforms) -> Any:
    """A condition on `Tenant.key`: a tenant of a platform this process reaches."""
    served = sorted(platforms.served())
    return or_(
        false(), *(Tenant.key.startswith(TenantKey.prefix(p), autoescape=True) for p in served)
    )


class Outbox:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Callable[[], datetime],
        platforms: Platforms,
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        # How to reach a member outside a live handler: retries, and answers that go out in
        # the order the member wrote (see `_earlier_first`).
        self.platforms = platforms

    async def deliver(
        self, scope: Scope, event_id: int, send: Send, fresh: bool = False
    ) -> list[str]:
        """Send the event's undelivered replies in order, each marked delivered once sent.

        `fresh`: this process handled the event just now, so no earlier attempt can have
        posted its replies (any other caller may be finishing a killed process's work).

        `send` is the channel of `scope`'s member: a reply of any other agent is never sent
        through it (an error is logged and nothing goes out), whatever id the caller had.
        Each reply is row-locked while it is sent, so two deliverers (a redelivered event,
        the retry sweep, a second process) never send the same reply twice. A send that
        fails is counted on the reply and raised; the reply stays for the next attempt.
        """
        sent: list[str] = []
        look_back = bool(self.platforms.served())
        more = True
        while more:
            async with self.sessions() as session, session.begin():
                # The member's earlier replies still waiting go first (`_earlier_first`).
                # Unlocked, in the transaction that takes the first reply: almost always
                # none waits, and then that costs one query, not a transaction of its own.
                if look_back:
                    look_back = False
                    reached = _reached(self.platforms)
                    waiting = await session.execute(_earlier(scope, event_id, reached))
                    if waiting.first() is not None:
                        await self._earlier_first(scope, event_id)
                        continue
                # Two at a time: when only one is left, no transaction is needed to find
                # that none is (the turn wrote all of its replies before it committed).
                found = await session.scalars(_UNDELIVERED, {"event": event_id})
                replies = list(found)
                if not replies:
                    return sent
                reply, more = replies[0], len(replies) > 1
                if (reply.tenant_id, reply.agent_id) != (scope.tenant_id, scope.agent_id):
                    log.error(
                        "reply %s of event %s belongs to agent %s, not to agent %s whose "
                        "channel was given: not sent",
                        reply.id,
                        event_id,
                        reply.agent_id,
                        scope.agent_id,
                    )
                    return sent
                try:
                    await send(reply.text, _posting(reply, first=fresh))
                except Exception as error:
                    reply.attempts += 1
                    reply.last_error = f"{type(error).__name__}: {error}"[:500]
                    failure = error
                else:
                    reply.delivered_at = self.clock()
                    sent.append(reply.text)
                    continue
            raise failure
        return sent

    async def _earlier_first(self, scope: Scope, event_id: int) -> None:
        """The member's replies to earlier events that are still waiting go out first, in
        order, each back where it was asked: turns of one member run one at a time, but
        their handlers (in several processes, one of them perhaps killed) finish in any
        order. A deliverer sending one of them holds its lock: this waits for it. One whose
        send fails stays for a later attempt and the rest go on without it; a second failure
        says the channel is down, and they all wait. Only replies of a platform this process
        reaches can go first."""
        if not self.platforms.served():
            return
        reached, failed = _reached(self.platforms), set[int]()
        while True:
            earlier = _earlier(scope, event_id, reached).where(Reply.id.not_in(failed))
            async with self.sessions() as session, session.begin():
                # Unlocked first: almost always nothing waits, and that costs one query.
                if (await session.execute(earlier)).first() is None:
                    return
                locked = earlier.with_for_update(of=Reply)
                found = (await session.execute(locked)).first()
                if found is None:
                    # Under FOR UPDATE with LIMIT, a row another deliverer just sent drops
                    # out without the next one taking its place: look again.
                    continue
                reply, tenant, user, payload = found
                try:
                    send = self.platforms.reply_route(tenant, user, payload.get("meta") or {})
                except NoPlatform:  # not reached from here after all: it cannot go first
                    return
                try:
                    await send(reply.text, _posting(reply, first=False))
                except Exception as error:  # that post failed: the others may not
                    reply.attempts += 1
                    reply.last_error = f"{type(error).__name__}: {error}"[:500]
                    log.warning("an earlier reply %s could not go first: %s", reply.id, error)
                    failed.add(reply.id)
                    if len(failed) > 1:
                        return
                    continue
                reply.delivered_at = self.clock()

    async def redeliver(self, older_than: timedelta) -> tuple[int, int]:
        """Retry replies that did not go out (platform down, process killed after the turn),
        of the tenants of platforms this process reaches, back where the member wrote
        (`Platforms.reply_route`). Returns (events delivered, events still failing).
        """
        if not self.platforms.served():
            return 0, 0
        cutoff = self.clock() - older_than
        async with self.sessions() as session:
            rows = (
                await session.execute(
                    select(
                        Event.id,
                        Event.tenant_id,
                        Event.agent_id,
                        Tenant.key,
                        User.external_id,
                        Event.payload,
                    )
                    .join(Reply, Reply.event_id == Event.id)
                    .join(Agent, Agent.id == Event.agent_id)
                    .join(User, User.id == Agent.user_id)
                    .join(Tenant, Tenant.id == Event.tenant_id)
                    .where(
                        Reply.delivered_at.is_(None),
                        Reply.attempts < MAX_DELIVERY_ATTEMPTS,
                        Reply.created_at <= cutoff,
                        _reached(self.platforms),
                        Tenant.departed_at.is_(None),  # the platform removed the bot
                    )
                    .distinct()
                    .order_by(Event.id)
                )
            ).all()
        done = failing = 0
        for event_id, tenant_id, agent_id, tenant, user, payload in rows:
            try:
                route = self.platforms.reply_route(tenant, user, payload.get("meta") or {})
                await self.deliver(Scope(tenant_id, agent_id), event_id, route)
                done += 1
            except Exception:
                log.warning("redelivery of event %s failed", event_id, exc_info=True)
                failing += 1
        return done, failing

    async def meta_of(self, event_id: int) -> dict[str, Any]:
        """What the front end recorded about an event's sender (channel, origin...)."""
        async with self.sessions() as session:
            payload = await session.scalar(select(Event.payload).where(Event.id == event_id))
        return dict((payload or {}).get("meta") or {})

    async def undelivered(self, event_id: int) -> list[str]:
        async with self.sessions() as session:
            rows = await session.scalars(
                select(Reply.text)
                .where(Reply.event_id == event_id, Reply.delivered_at.is_(None))
                .order_by(Reply.id)
            )
            return list(rows)

    async def take_replies(self, event_id: int) -> list[str]:
        """The undelivered replies to an event, marked delivered."""
        async with self.sessions() as session, session.begin():
            rows = await session.execute(
                update(Reply)
                .where(Reply.event_id == event_id, Reply.delivered_at.is_(None))
                .values(delivered_at=self.clock())
                .returning(Reply.id, Reply.text)
            )
            return [text for _, text in sorted(rows.all())]

    async def take_earlier(self, scope: Scope, event_id: int, meta: dict[str, Any]) -> list[str]:
        """The undelivered replies to the member's events before `event_id` whose sender
        recorded `meta` (the same sender: answers that waited for a model that was down),
        taken, oldest first."""
        theirs = select(Event.id).where(
            Event.tenant_id == scope.tenant_id,
            Event.agent_id == scope.agent_id,
            Event.id < event_id,
            Event.payload["meta"].contains(meta),
        )
        async with self.sessions() as session, session.begin():
            rows = await session.execute(
                update(Reply)
                .where(Reply.delivered_at.is_(None), Reply.event_id.in_(theirs))
                .values(delivered_at=self.clock())
                .returning(Reply.id, Reply.text)
            )
            return [text for _, text in sorted(rows.all())]

    async def take_waiting(
        self, scope: Scope, stale: timedelta = timedelta(seconds=30)
    ) -> list[str]:
        """Replies nobody took, taken: messages the bot started (openers for a terminal
        member), and replies older than `stale` (their sender crashed). Fresh replies to a
        member's own messages are left to the process that is about to show them."""
        started = select(Event.id).where(
            Event.tenant_id == scope.tenant_id,
            Event.agent_id == scope.agent_id,
            Event.kind == EventKind.SCHEDULED,
        )
        async with self.sessions() as session, session.begin():
            rows = await session.execute(
                update(Reply)
                .where(
                    Reply.tenant_id == scope.tenant_id,
                    Reply.agent_id == scope.agent_id,
                    Reply.delivered_at.is_(None),
                    Reply.event_id.in_(started) | (Reply.created_at <= self.clock() - stale),
                )
                .values(delivered_at=self.clock())
                .returning(Reply.id, Reply.text)
            )
            return [text for _, text in sorted(rows.all())]


_UNDELIVERED = (  # an event's next two replies to send, built once
    select(Reply)
    .where(
        Reply.event_id == bindparam("event"),
        Reply.delivered_at.is_(None),
        Reply.attempts < MAX_DELIVERY_ATTEMPTS,
    )
    .order_by(Reply.id)
    .limit(2)
    .with_for_update(skip_locked=True)
)


def _earlier(scope: Scope, event_id: int, reached: Any) -> Any:
    """The oldest reply still waiting to one of the member's events before `event_id`, when
    the member's tenant is `reached`."""
    return (
        select(Reply, Tenant.key, User.external_id, Event.payload)
        .join(Event, Event.id == Reply.event_id)
        .join(Agent, Agent.id == Reply.agent_id)
        .join(User, User.id == Agent.user_id)
        .join(Tenant, Tenant.id == Reply.tenant_id)
        .where(
            Reply.tenant_id == scope.tenant_id,
            Reply.agent_id == scope.agent_id,
            Reply.event_id < event_id,
            Reply.delivered_at.is_(None),
            Reply.attempts < MAX_DELIVERY_ATTEMPTS,
            reached,
        )
        .order_by(Reply.id)
        .limit(1)
    )
