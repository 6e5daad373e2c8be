"""The engine: the one entry point adapters and the terminal use.

    submit(scope, event)   store the event (deduplicated) before any model call; with
                           `hold`, it waits for `release` (its files are being fetched)
    answer(scope, id)      drain + hand over that event's replies (deliver or take)
    drain(scope)           handle the agent's pending events, oldest first, one at a time
    converse(scope, text)  submit + answer: what a chat front end wants
    store_file(scope, f)   a shared file into archival memory, with its user-action event
    upload(scope, file)    store_file + answer
    resume()               after a restart, drain every agent with pending events (and
                           release events held longer than HOLD_LIMIT)
    embeddings.wake()      after each commit: messages get vectors in the background
    (`engine.pictures` looks at shared pictures; deliver, redeliver, take_replies, ... come
    from `engine.outbox`; what is in progress, for a clean shutdown, from `engine.activity`;
    what was stored from where, for reading a platform back after a restart, `engine.seen`)

Each event runs in its own transaction holding the agent's row lock, so one agent handles
one event at a time across every process, in arrival order; the replies go to the outbox in
that same transaction. A model failure rolls the turn back to a savepoint, keeps the
member's message in recall, and answers with a clear apology instead of silence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import within_ceilings
from core.directory import ensure_agent
from core.errors import CompanionError, ModelError
from core.events import EventKind, EventStatus, InboundEvent, trigger_fields
from core.logcontext import bind
from core.members.documents import chunk_text, extract_text, store_document, upload_name
from core.memory.embeddings import EmbeddingWorker
from core.memory.store import AgentStore
from core.memory.turn import Mind, Turn, TurnResult
from core.memory.window import MainContext
from core.models import Agent, Event
from core.ports import Counter, Send, Timer
from core.runtime.activity import Activity
from core.runtime.apologies import apology
from core.runtime.budgets import over_limit, record_usage
from core.runtime.gate import TurnGate
from core.runtime.outbox import Outbox
from core.runtime.pictures import Pictures, Vision
from core.runtime.seen import Seen
from core.schedule.planning import after_event
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


def _mine(scope: Scope) -> Any:
    """The agent's own events."""
    return (Event.tenant_id == scope.tenant_id) & (Event.agent_id == scope.agent_id)


def _pending(scope: Scope, what: Any) -> Any:
    """A query for one of the agent's pending events."""
    return select(what).where(_mine(scope), Event.status == EventStatus.PENDING).limit(1)


class Engine:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        mind: Mind,
        clock: Callable[[], datetime] = utcnow,
        embeddings: EmbeddingWorker | None = None,
        turns_at_once: int = 10,
        vision: Vision | None = None,
    ) -> None:
        self.sessions = sessions
        self.mind = mind
        self.clock = clock
        self.embeddings = embeddings  # woken after each commit that stored new messages
        self.outbox = Outbox(sessions, clock)
        self.activity = Activity()
        self.seen = Seen(sessions)
        self.gate = TurnGate(turns_at_once)  # who may take a connection for a turn, when
        self.pictures = Pictures(sessions, mind, clock, vision or Vision())

    async def wait_idle(self) -> None:
        """Return once nothing is in progress: no handler, turn or background work."""
        await self.activity.idle()

    async def agent(self, tenant: str, user: str, display_name: str | None = None) -> Scope:
        async with self.sessions() as session, session.begin():
            return await ensure_agent(session, tenant, user, self.mind.config, display_name)

    async def _insert_event(
        self, session: AsyncSession, scope: Scope, event: InboundEvent, hold: bool = False
    ) -> tuple[int, bool]:
        """(event id, whether it is new); a redelivery gets the first delivery's id."""
        values = {
            "tenant_id": scope.tenant_id,
            "agent_id": scope.agent_id,
            "kind": str(event.kind),
            "payload": event.payload(),
            "dedup_key": event.dedup_key,
            "status": EventStatus.WAITING if hold else EventStatus.PENDING,
            "created_at": self.clock(),
        }
        # Keys per agent (migrations 0008, 0017): another member's same platform id is theirs.
        new_id = await session.scalar(
            insert(Event)
            .values(**values)
            .on_conflict_do_nothing(
                index_elements=[Event.tenant_id, Event.agent_id, Event.dedup_key]
            )
            .returning(Event.id)
        )
        if new_id is not None:
            return int(new_id), True
        existing = await session.scalar(
            select(Event.id).where(_mine(scope), Event.dedup_key == event.dedup_key)
        )
        if existing is None:  # the key's row exists but is not this agent's: cannot happen
            raise RuntimeError(f"event key {event.dedup_key!r} of agent {scope.agent_id} vanished")
        return int(existing), False

    async def submit(self, scope: Scope, event: InboundEvent, hold: bool = False) -> int:
        """Store the event before anything else happens to it.

        With `hold`, no drain takes it until `release`: a message whose files are still being
        fetched waits for them, so the agent reads the files before the words beside them.
        """
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            return (await self._insert_event(session, scope, event, hold))[0]

    async def release(self, scope: Scope, event_id: int, note: str | None = None) -> None:
        """A held event joins the agent's pending events (once; later calls do nothing),
        with `note` (what came of its pictures) after its words."""
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            event = await session.scalar(
                select(Event)
                .where(_mine(scope), Event.id == event_id, Event.status == EventStatus.WAITING)
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
            event_id, new = await self._insert_event(session, scope, event)
            if new:
                store = AgentStore(session, scope, self.mind.config.max_message_tokens)
                now, embedder = self.clock(), self.mind.embedder
                await store_document(store, name, chunks, now, embedder, event_id)
        return event_id, new

    async def drain(self, scope: Scope) -> list[TurnResult]:
        async with self.gate.turn(scope.agent_id):  # before taking a connection
            return await self._drain(scope)

    async def _drain(self, scope: Scope) -> list[TurnResult]:
        results: list[TurnResult] = []
        while True:
            async with self.sessions() as session, session.begin():
                await enter_scope(session, scope)
                store = AgentStore(session, scope, self.mind.config.max_message_tokens)
                agent = await store.lock_agent()
                event = await session.scalar(_pending(scope, Event).order_by(Event.id))
                if event is None:
                    return results
                with bind(tenant_id=scope.tenant_id, agent_id=scope.agent_id, event_id=event.id):
                    result, context = await self._handle(session, store, agent, event)
                results.append(result)
                more = await session.scalar(_pending(scope, Event.id))
            if context is not None:  # committed: the agent's next turn here starts from it
                self.mind.contexts.put(scope.agent_id, context.snapshot())
            if self.embeddings is not None:  # committed: the new messages get their vectors
                self.embeddings.wake()
            # An event stored after this check is drained by its own submitter, who waited
            # for the lock this transaction held.
            if more is None:
                return results

    async def _handle(
        self, session: AsyncSession, store: AgentStore, agent: Agent, event: Event
    ) -> tuple[TurnResult, MainContext | None]:
        """Handle one event: (what came of it, the main context a completed turn left)."""
        now, metrics, started = self.clock(), self.mind.metrics, time.perf_counter()
        context: MainContext | None = None
        assert store.member is not None, "drain locked the agent"
        tenant, user = store.member
        config = within_ceilings(self.mind.config, (tenant.settings or {}).get("limits"))
        limited = await over_limit(session, store.scope, event, now, config)
        if limited is not None:
            reason, reply = limited
            metrics.count(Counter.LIMITED, reason=reason)
            result = TurnResult(event.id, error=f"limited: {reason}")
            status, replies = (
                EventStatus.LIMITED,
                [reply] if event.kind == EventKind.USER_MESSAGE else [],
            )
        else:
            result, status, replies, context = await self._think(
                session, store, agent, event, now, user.timezone, user.display_name
            )
        if status != EventStatus.DONE:
            # No turn happened (or it was rolled back): the member's words still go to recall,
            # and into the FIFO queue, counted by the store like every message.
            await store.append(
                now, event_id=event.id, **trigger_fields(event.kind, event.payload["text"])
            )
        for text in replies:
            await store.add_outbox(text, event.id, now)
        event.status, event.error, event.processed_at = status, result.error, now
        purpose = (event.payload.get("meta") or {}).get("purpose")
        store.seal()  # with the schedule's changes to the row, in one UPDATE
        after_event(
            agent,
            tenant,
            user,
            event.kind,
            purpose,
            status == EventStatus.DONE and bool(replies),
            now,
            self.mind.config.schedule,
        )
        await record_usage(session, store.scope, result, now)
        metrics.count(Counter.EVENTS, kind=event.kind, status=status)
        metrics.observe(Timer.TURN, time.perf_counter() - started)
        result.replies = replies
        return result, context

    async def _think(
        self,
        session: AsyncSession,
        store: AgentStore,
        agent: Agent,
        event: Event,
        now: datetime,
        timezone: str,
        member_name: str | None,
    ) -> tuple[TurnResult, EventStatus, list[str], MainContext | None]:
        """Run the turn in a savepoint; a failure rolls it back and becomes an apology."""
        turn = Turn(self.mind, store, agent, event, now, timezone, member_name)
        try:
            async with session.begin_nested():
                result = await turn.run()
            return result, EventStatus.DONE, result.replies, turn.context
        except ModelError as error:
            log.warning("event %s of agent %s: %s", event.id, store.scope.agent_id, error)
            self.mind.metrics.count(Counter.ERRORS, kind="model")
            reply, problem = apology(error), str(error)
        except Exception as error:
            log.exception("event %s of agent %s failed", event.id, store.scope.agent_id)
            self.mind.metrics.count(Counter.ERRORS, kind="internal")
            reply, problem = apology(error), f"{type(error).__name__}: {error}"
        await session.refresh(agent)
        spent = turn.result  # model calls made before the failure are still paid for
        failed = TurnResult(
            event.id,
            error=problem,
            tokens=spent.tokens,
            model_calls=spent.model_calls,
            calls=spent.calls,
        )
        failed.steps = spent.steps
        replies = [reply] if event.kind == EventKind.USER_MESSAGE else []
        return failed, EventStatus.FAILED, replies, None

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
            results = {r.event_id: r for r in await self.drain(scope)}
            if send is None:
                replies = await self.outbox.take_replies(event_id)
            else:
                fresh = event_id in results  # handled by this drain: nobody posted yet
                replies = await self.outbox.deliver(scope, event_id, send, fresh)
            return Exchange(event_id, replies, results.get(event_id))

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
            count = 0
            for event in held:
                names = (event.payload.get("meta") or {}).get("files") or ["files"]
                self._unhold(event, UNREAD_FILES.format(names=", ".join(names)))
                count += 1
            return count

    async def resume(self, at_once: int = 1) -> int:
        """Drain every agent that has pending events (after a crash or restart), `at_once`
        agents side by side; returns how many agents had some."""
        await self.release_stale()
        async with self.sessions() as session:
            rows = await session.execute(
                select(Event.tenant_id, Event.agent_id)
                .where(Event.status == EventStatus.PENDING)
                .distinct()
            )
            scopes = [Scope(t, a) for t, a in rows.all()]
        slots = asyncio.Semaphore(max(1, at_once))

        async def resume_one(scope: Scope) -> None:
            async with slots:
                try:
                    await self.drain(scope)
                except CompanionError:
                    log.exception("could not resume agent %s", scope.agent_id)

        await asyncio.gather(*(resume_one(scope) for scope in scopes))
        return len(scopes)
