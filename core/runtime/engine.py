"""The engine: the one entry point adapters and the terminal use.

    submit(scope, event)   store the event (deduplicated) before any model call; with
                           `hold`, it waits for `release` (its files are being fetched)
    answer(scope, id)      see_through + hand over that event's replies (deliver or take)
    see_through(scope, id) drain until that event is handled (here or by the process that
                           has the agent), or waits for a model that is down
    drain(scope)           handle the agent's pending events one at a time: one whose turn
                           began first, then oldest first
    converse(scope, text)  submit + answer: what a chat front end wants
    store_file(scope, f)   a shared file into archival memory, with its user-action event
    upload(scope, file)    store_file + answer
    resume()               after a restart or an outage, drain every agent with pending
                           events (and release events held longer than HOLD_LIMIT)
    embeddings.wake()      after each commit: messages get vectors in the background
    (`engine.pictures` looks at shared pictures; deliver, redeliver, take_replies, ... come
    from `engine.outbox`, which reaches members outside a live handler through
    `engine.platforms`, handed in; what is in progress, for a clean shutdown, from
    `engine.activity`; what was stored from where, for reading a platform back after a
    restart, `engine.seen`)

A drain first claims the agent in Postgres (`Presence`): one process works on an agent at a
time, its events one at a time, in arrival order. Each event's turn commits what it did
before every model call and holds no connection while the model thinks (`Checkpoint`);
what one event comes to (a turn, a limit, an apology, waiting for a model that is down) is
`Handler`'s (core/runtime/handling.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.directory import ensure_agent
from core.errors import AgentErased, ClaimLost, CompanionError
from core.events import EventKind, EventStatus, InboundEvent
from core.logcontext import bind
from core.memory.documents import chunk_text, extract_text, store_document, upload_name
from core.memory.embeddings import EmbeddingWorker
from core.memory.store import AgentStore
from core.memory.turn import Mind, TurnResult
from core.memory.window import MainContext
from core.models import Event, Message
from core.ports import NoPlatforms, Platforms, Send
from core.runtime.activity import Activity
from core.runtime.gate import Slot, TurnGate
from core.runtime.handling import Handler, agent_events, waits_for_model
from core.runtime.intake import Admit, Taken, insert_event, take
from core.runtime.outbox import Outbox
from core.runtime.pictures import Pictures, Vision
from core.runtime.presence import Checkpoint, Claim, Presence
from core.runtime.reconnect import keep_usage
from core.runtime.seen import Seen
from core.scope import Scope, enter_scope

log = logging.getLogger(__name__)

HOLD_LIMIT = timedelta(minutes=2)  # the most a held event waits for its files
UNREAD_FILES = (
    "[The person also shared {names} with this message, but the files could not be read "
    "in time. Tell them, and ask them to share the files again.]"
)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Exchange:
    """What one submitted event produced, as its sender sees it."""

    event_id: int
    replies: list[str]
    result: TurnResult | None  # None when another process handled the event


def _pending(what: Any) -> Any:
    """A query for one of the agent's pending events (built once: cheaper than per turn)."""
    mine = (Event.tenant_id == bindparam("tenant")) & (Event.agent_id == bindparam("agent"))
    return select(what).where(mine, Event.status == EventStatus.PENDING).limit(1)


_ANY_PENDING = _pending(Event.id)


def _agent_params(scope: Scope) -> dict[str, int]:
    return {"tenant": scope.tenant_id, "agent": scope.agent_id}


# The agent's pending event to handle next: one whose turn began (its words are in memory:
# it waits for the model, or its process died) before any other, else the oldest. A turn
# goes on from the end of the queue it left, answering the newest words there; an older
# event that joined the pending ones later (held for its files, or stored by a transaction
# that committed after a newer one's) must not put its words after them.
_BEGUN = exists().where(Message.tenant_id == Event.tenant_id, Message.event_id == Event.id)
_NEXT_PENDING = _pending(Event).order_by(_BEGUN.desc(), Event.id)


class Engine:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        mind: Mind,
        clock: Callable[[], datetime] = utcnow,
        embeddings: EmbeddingWorker | None = None,
        presence: Presence | None = None,
        vision: Vision | None = None,
        platforms: Platforms | None = None,
    ) -> None:
        self.sessions, self.mind, self.clock = sessions, mind, clock
        self.embeddings = embeddings  # woken after each commit that stored new messages
        # Members outside a live handler (openers, retried replies), through the platforms
        # the composition root serves: none unless it hands them in.
        self.platforms = platforms or NoPlatforms()
        self.outbox = Outbox(sessions, clock, self.platforms)
        self.activity, self.seen = Activity(), Seen(sessions)
        self.handler = Handler(mind, clock)  # what one event comes to, inside the claim
        # One drain of an agent at a time in this process; turns give way to acknowledgements.
        self.gate = TurnGate(yield_to=self.activity.quiet)
        # The agents this process works on, claimed in Postgres (one turn per agent at once).
        self.presence = presence or Presence(sessions.kw["bind"])
        self.pictures = Pictures(sessions, mind, clock, vision or Vision())

    async def wait_idle(self) -> None:
        """Return once nothing is in progress: no handler, turn or background work."""
        await self.activity.idle()

    async def agent(self, tenant: str, user: str, display_name: str | None = None) -> Scope:
        async with self.sessions() as session, session.begin():
            return await ensure_agent(session, tenant, user, self.mind.config, display_name)

    async def take(
        self,
        tenant: str,
        user: str,
        event: InboundEvent,
        hold: bool = False,
        admit: Admit | None = None,
        display_name: str | None = None,
    ) -> Taken:
        """A platform's message stored for the member's agent in one transaction, `admit`
        (the admins' rules) asked first: see `core.runtime.intake.take`."""
        config, now = self.mind.config, self.clock()
        return await take(
            self.sessions, config, now, tenant, user, event, hold, admit, display_name
        )

    async def submit(self, scope: Scope, event: InboundEvent, hold: bool = False) -> int:
        """Store the event before anything else happens to it.

        With `hold`, no drain takes it until `release`: a message whose files are still being
        fetched waits for them, so the agent reads the files before the words beside them.
        """
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            return (await insert_event(session, scope, event, self.clock(), hold))[0]

    async def release(self, scope: Scope, event_id: int, note: str | None = None) -> None:
        """A held event joins the agent's pending events (once; later calls do nothing),
        with `note` (what came of its pictures) after its words."""
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            event = await session.scalar(
                select(Event)
                .where(
                    agent_events(scope), Event.id == event_id, Event.status == EventStatus.WAITING
                )
                .with_for_update()
            )
            if event is not None:
                self._unhold(event, note)

    def _unhold(self, event: Event, note: str | None = None) -> None:
        """Pending again; held only for its files (no words, nothing went wrong): done."""
        text = "\n\n".join(part for part in (event.payload["text"], note) if part)
        event.payload = {**event.payload, "text": text}
        event.status = EventStatus.PENDING if text else EventStatus.DONE
        if not text:
            event.processed_at = self.clock()

    async def upload(
        self,
        scope: Scope,
        filename: str,
        data: bytes,
        dedup_key: str | None = None,
        meta: dict[str, Any] | None = None,
        send: Send | None = None,
    ) -> Exchange:
        """Store a file's text in archival memory, then tell the agent (a user action).

        Raises `UploadRejected` (nothing stored) for a file it will not take. The passages
        and the event commit together, so a redelivered upload is stored once.
        """
        async with self.activity.working():
            event_id, new = await self.store_file(scope, filename, data, dedup_key, meta)
            if send is None and not new:
                return Exchange(event_id, [], None)
            return await self.answer(scope, event_id, send)

    async def store_file(
        self,
        scope: Scope,
        filename: str,
        data: bytes,
        dedup_key: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[int, bool]:
        """The file's passages and its user-action event, in one transaction: (id, new)."""
        name = upload_name(filename)
        # Parsing a PDF or tokenizing a big file is CPU work: off the event loop.
        chunks = await asyncio.to_thread(lambda: chunk_text(extract_text(name, data)))
        text = (
            f"The person shared the file {name!r} ({len(data):,} bytes). Its text is now in "
            f"archival memory as {len(chunks)} passages with source {name!r}. It begins: "
            f"{chunks[0][:300]}"
        )
        event = InboundEvent(EventKind.USER_ACTION, text, dedup_key, meta or {})
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            event_id, new = await insert_event(session, scope, event, self.clock())
            if new:
                store = AgentStore(session, scope, self.mind.config.max_message_tokens)
                now, embedder = self.clock(), self.mind.embedder
                await store_document(store, name, chunks, now, embedder, event_id)
        return event_id, new

    async def drain(self, scope: Scope) -> list[TurnResult]:
        """Handle the agent's pending events, oldest first, unless another process is
        working on the agent (it handles them all): what came of each one handled here."""
        async with self.gate.turn(scope.agent_id):  # one drain of an agent per process
            claim = await self.presence.claim(scope.agent_id)
            if claim is None:
                return []
            try:
                return await self._drain(scope, claim)
            except AgentErased as error:  # reset or forgotten meanwhile: nothing is left to do
                log.info("%s", error)
                return []
            finally:
                await self.presence.release(claim)

    async def _drain(self, scope: Scope, claim: Claim) -> list[TurnResult]:
        results: list[TurnResult] = []
        more = True
        while more:
            slot = self.gate.slot()  # a share of the pool while the turn's transaction runs
            await slot.take()
            try:
                handled = await self._next(scope, claim, slot)
            finally:
                slot.give()
            if handled is None:
                return results
            result, context, more = handled
            results.append(result)
            if context is not None:  # committed: the agent's next turn here starts from it
                self.mind.contexts.put(scope.agent_id, context.snapshot())
            if self.embeddings is not None:  # committed: the new messages get their vectors
                self.embeddings.wake()
        return results

    async def _next(
        self, scope: Scope, claim: Claim, slot: Slot
    ) -> tuple[TurnResult, MainContext | None, bool] | None:
        """The agent's oldest pending event, handled and committed, and whether another
        waits (one stored after this check is drained by its submitter); None when there
        was none, or the claim was lost."""
        async with self.sessions() as session:
            await self.presence.enter(session, scope, claim)
            store = AgentStore(session, scope, self.mind.config.max_message_tokens)
            agent = await store.lock_agent()
            params = _agent_params(scope)
            event = await session.scalar(_NEXT_PENDING, params)
            if event is None:
                await session.commit()
                return None
            pause = Checkpoint(session, store, self.presence, claim, slot)
            spent = TurnResult(event.id)  # the turn's model calls, whatever becomes of it
            with bind(tenant_id=scope.tenant_id, agent_id=scope.agent_id, event_id=event.id):
                try:
                    handled = self.handler.handle(session, store, agent, event, pause, spent)
                    result, context = await handled
                    more = not result.deferred and await session.scalar(_ANY_PENDING, params)
                    await session.commit()
                except Exception as error:
                    if isinstance(error, AgentErased):  # its usage went with it
                        raise
                    if isinstance(error, ClaimLost):
                        log.warning("agent %s: claim lost; its turn stops here", scope.agent_id)
                        await session.rollback()
                    limit = self.mind.config.max_message_tokens
                    await keep_usage(self.sessions, scope, spent, self.clock().date(), limit)
                    if isinstance(error, ClaimLost):
                        return None
                    raise
            spent.recorded = len(spent.calls)
        return result, context, bool(more)

    async def converse(
        self, scope: Scope, event: InboundEvent, send: Send | None = None
    ) -> Exchange:
        """Submit, handle and answer one event; replies go through `send` when given."""
        async with self.activity.working():
            return await self.answer(scope, await self.submit(scope, event), send)

    async def answer(self, scope: Scope, event_id: int, send: Send | None = None) -> Exchange:
        """Handle the agent's pending events, then hand over the replies to `event_id`:
        through `send` (each marked delivered once sent), or taken as they are."""
        async with self.activity.working():
            results = await self.see_through(scope, event_id)
            if send is None:
                replies = await self.outbox.take_replies(event_id)
            else:
                fresh = event_id in results  # handled by this drain: nobody posted yet
                await self.activity.quiet()  # acknowledgements first
                replies = await self.outbox.deliver(scope, event_id, send, fresh)
            return Exchange(event_id, replies, results.get(event_id))

    async def see_through(self, scope: Scope, event_id: int) -> dict[int, TurnResult]:
        """Drain the agent until `event_id` is handled, here or by another process that has
        the agent (it drains every pending event, this one too; if it stops, this process
        takes over), or waits for a model that is down: what the drains here handled."""
        results, wait = {r.event_id: r for r in await self.drain(scope)}, 0.02
        while event_id not in results and await self._pending(scope, event_id):
            await asyncio.sleep(wait)
            wait = min(wait * 2, 1.0)
            results.update((r.event_id, r) for r in await self.drain(scope))
        return results

    async def _pending(self, scope: Scope, event_id: int) -> bool:
        """Is the event still pending, and not waiting for a model that is down?"""
        query = select(Event.status, Event.error).where(agent_events(scope), Event.id == event_id)
        async with self.sessions() as session:
            row = (await session.execute(query)).first()
        if row is None or row.status != EventStatus.PENDING:
            return False
        return not waits_for_model(row.error)

    async def aclose(self) -> None:
        """Let go of the process's presence in the database (its claims go with it)."""
        await self.presence.close()

    async def release_stale(self) -> int:
        """Release events held longer than HOLD_LIMIT (their fetcher died or gave up); the
        agent hears which files it never got. Returns how many."""
        async with self.sessions() as session, session.begin():
            held = await session.scalars(
                select(Event)
                .where(
                    Event.status == EventStatus.WAITING,
                    Event.created_at < self.clock() - HOLD_LIMIT,
                )
                .with_for_update(skip_locked=True)
            )
            released = held.all()
            for event in released:
                names = (event.payload.get("meta") or {}).get("files") or ["files"]
                self._unhold(event, UNREAD_FILES.format(names=", ".join(names)))
            return len(released)

    async def resume(self, at_once: int = 1) -> int:
        """Drain every agent with pending events (after a restart, or an outage), `at_once`
        side by side, the longest waiting first; returns how many had some. A down model:
        nothing until its probe is due, then one at a time until a turn finds it back."""
        await self.release_stale()
        outage = self.mind.health.outage
        if not outage.due():
            return 0
        async with self.sessions() as session:
            rows = await session.execute(
                select(Event.tenant_id, Event.agent_id)
                .where(Event.status == EventStatus.PENDING)
                .group_by(Event.tenant_id, Event.agent_id)
                .order_by(func.min(Event.id))
            )
            scopes = [Scope(t, a) for t, a in rows.all()]
        slots = asyncio.Semaphore(max(1, at_once))

        async def resume_one(scope: Scope) -> None:
            async with slots:
                try:
                    if outage.due():  # else it went down meanwhile: the rest wait with it
                        await self.drain(scope)
                except CompanionError:
                    log.exception("could not resume agent %s", scope.agent_id)

        waiting = list(scopes)
        while waiting and outage.down_since is not None and outage.due():  # probe by probe
            await resume_one(waiting.pop(0))
        await asyncio.gather(*(resume_one(scope) for scope in waiting))
        return len(scopes)
