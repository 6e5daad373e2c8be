"""Reads and writes of one agent's memory, always inside that agent's scope.

`AgentStore` wraps a session and a `Scope` (tenant id, agent id); every query it makes
filters on both. Search lives in `core.memory.search`; whole-agent data moves in
`core.members.portability`.

It is the one place a message enters or leaves the FIFO queue, so it counts every message
it stores (`prompt.counted`, for the deployment's `max_message_tokens`), whatever the path:
a turn, a refused or failed event, an import; reading the queue back recounts only when the
agent's `count_basis` says its messages were counted another way (another window, other
rules, or before every path counted). And every change to the queue or the summary moves
the agent's `context_version` on, once per transaction, so a copy of the main context kept
between turns (`core.memory.contexts`) is never used after it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import Executable, Table, bindparam, delete, event, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncSession

from core.errors import AgentErased, BlockRefused
from core.events import EventStatus
from core.memory import terms
from core.memory.prompt import Entry, counted, render
from core.models import (
    Agent,
    Block,
    Event,
    Message,
    MessageTerm,
    MessageWord,
    Passage,
    PassageVector,
    Reply,
    Summary,
    Tenant,
    Usage,
    User,
)
from core.scope import Scope

MESSAGES: Table = Message.__table__  # type: ignore[assignment]


def write_block(block: Block, value: str, now: datetime) -> None:
    """Every change of a block's text, by the agent or a person, goes through here.

    A value over the block's character limit is refused and nothing changes.
    """
    if len(value) > block.char_limit:
        raise BlockRefused(
            block.label,
            f"block {block.label!r} would have {len(value)} characters, over its limit of "
            f"{block.char_limit}",
        )
    block.value = value
    block.updated_at = now


@functools.cache
def _message_insert(columns: tuple[str, ...], searchable: bool) -> Executable:
    """The INSERT of one message with these columns, built once: building the statement
    (a searchable message's carries its vector row and its counted words) costs more CPU
    than sending it. Returns the new message's id."""
    stored = insert(MESSAGES).values({c: bindparam(c, type_=MESSAGES.c[c].type) for c in columns})
    if searchable:  # with its vector's row and its words counted, in the same statement
        return terms.counted_insert(stored)
    return stored.returning(MESSAGES.c.id)


def _theirs(model: Any) -> Any:
    """The rows of the agent named by the bound parameters `tenant` and `agent`."""
    return (model.tenant_id == bindparam("tenant")) & (model.agent_id == bindparam("agent"))


def _the_agent() -> Any:
    return (Agent.id == bindparam("agent")) & (Agent.tenant_id == bindparam("tenant"))


# The statements of every turn, built once (building one costs more CPU than sending it).
@functools.cache
def _lock_agent() -> Executable:
    passages = select(func.count()).where(_theirs(Passage)).scalar_subquery()
    searchable = (
        select(MessageTerm.messages)
        .where(_theirs(MessageTerm), MessageTerm.lexeme == terms.CORPUS)
        .scalar_subquery()
    )
    return (
        select(Agent, Tenant, User, passages, searchable)
        .join(User, User.id == Agent.user_id)
        .join(Tenant, Tenant.id == Agent.tenant_id)
        .where(_the_agent())
        .with_for_update(key_share=True, of=Agent)
    )


@functools.cache
def _relock() -> Executable:
    return (
        select(Agent)
        .where(_the_agent())
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )


@functools.cache
def _blocks() -> Executable:
    return select(Block).where(_theirs(Block))


class AgentStore:
    def __init__(self, session: AsyncSession, scope: Scope, max_message_tokens: int) -> None:
        self.session = session
        self.scope = scope
        self.max_message_tokens = max_message_tokens
        self.agent: Agent | None = None  # the locked row, once `lock_agent` took it
        self.member: tuple[Tenant, User] | None = None  # its tenant and user, with it
        self.passages = 0  # in archival storage when the row was locked
        self._locked_version = 0
        self._dirty = False  # the queue or summary changed in this transaction
        self._bumped = False
        self.passages_added = 0  # by this store: a turn's status counts them without a query
        # The agent's searchable messages (the word index's count when the row was locked,
        # and those stored since): what conversation_search can find
        self.searchable = 0

    @property
    def _params(self) -> dict[str, int]:
        return {"tenant": self.scope.tenant_id, "agent": self.scope.agent_id}

    def _mine(self, model: Any) -> Any:
        return (model.tenant_id == self.scope.tenant_id) & (model.agent_id == self.scope.agent_id)

    async def lock_agent(self) -> Agent:
        """Row-lock the agent for this transaction: one turn at a time, across processes.

        FOR NO KEY UPDATE, not FOR UPDATE: inserting an event that references the agent
        (its foreign key takes KEY SHARE) must not wait for the turn to end. Its tenant and
        user (`member`) and how many passages it holds (`passages`) come in the same round
        trip, unlocked.
        """
        row = (await self.session.execute(_lock_agent(), self._params)).first()
        if row is None:  # erased since the caller found it
            raise AgentErased(self.scope.agent_id)
        agent, self.member, self.passages = row[0], (row[1], row[2]), int(row[3])
        self.searchable = int(row[4] or 0)
        self.agent, self._locked_version = agent, agent.context_version
        event.listen(self.session.sync_session, "before_commit", self._seal)
        return agent

    async def relock(self) -> Agent:
        """Lock the agent's row again in a new transaction of the same turn (after a model
        call, which no transaction spans): the row read afresh, the version from it."""
        assert self.agent is not None, "lock_agent first"
        agent = await self.session.scalar(_relock(), self._params)
        if agent is None:  # erased (reset, forget) while the model thought
            raise AgentErased(self.scope.agent_id)
        self.agent, self._locked_version, self._dirty = agent, agent.context_version, False
        return agent

    async def _changed(self) -> None:
        """The queue or the summary changed: the context version moves on, once.

        On the locked row, at commit (`_seal`): one more column in the UPDATE the turn makes
        anyway, and a rolled-back savepoint cannot take it back. Otherwise at once.
        """
        self._dirty = True
        if self.agent is None and not self._bumped:
            await self.session.execute(
                update(Agent)
                .where(Agent.id == self.scope.agent_id, Agent.tenant_id == self.scope.tenant_id)
                .values(context_version=Agent.context_version + 1)
            )
            self._bumped = True

    def _seal(self, session: Any) -> None:
        """At the transaction's commit (not a savepoint's): the version moves on."""
        if not session.in_nested_transaction():
            self.seal()

    def seal(self) -> None:
        """Move the locked row's version on now if the context changed (it is done at
        commit anyway; sooner, it goes out with the row's other changes)."""
        if self._dirty and self.agent is not None:
            self.agent.context_version = self._locked_version + 1

    async def blocks(self) -> dict[str, Block]:
        rows = await self.session.scalars(_blocks(), self._params)
        return {block.label: block for block in rows}

    async def in_context(self) -> list[Message]:
        """The FIFO queue's messages, oldest first, as stored."""
        return list(
            await self.session.scalars(
                select(Message).where(self._mine(Message), Message.in_context).order_by(Message.id)
            )
        )

    async def queue(self, recount: bool) -> list[Entry]:
        """The FIFO queue as the prompt shows it; `recount`: count each message again
        (its stored count was made another way) and store the counts that differ."""
        rows = await self.in_context()
        size = self.max_message_tokens
        if not recount:
            return [Entry(m, render(m, size)) for m in rows]
        before = [m.tokens for m in rows]
        # Tokenizing a long queue is CPU work: off the event loop.
        entries = await asyncio.to_thread(lambda: [counted(m, size) for m in rows])
        if any(m.tokens != old for m, old in zip(rows, before, strict=True)):
            await self._changed()
        return entries

    async def enqueue(self, now: datetime, **fields: Any) -> Entry:
        """Store a message, in the FIFO queue unless `in_context=False`, counted as the
        prompt shows it; returns it with that rendering."""
        fields.setdefault("in_context", True)
        values = {
            "tenant_id": self.scope.tenant_id,
            "agent_id": self.scope.agent_id,
            "created_at": now,
            **fields,
        }
        message = Message(**values)
        entry = counted(message, self.max_message_tokens)
        # One INSERT on the table, not a flush of the session: nothing else waits to go out
        # with it (the agent row's changes leave once, with the turn's last ones).
        values["tokens"] = message.tokens
        searchable = message.search_text is not None
        statement = _message_insert(tuple(sorted(values)), searchable)
        message.id = await self.session.scalar(statement, values)
        self.searchable += searchable
        if message.in_context:
            await self._changed()
        return entry

    async def append(self, now: datetime, **fields: Any) -> Message:
        """Store a message (see `enqueue`)."""
        return (await self.enqueue(now, **fields)).message

    async def evict(self, messages: Sequence[Message]) -> None:
        ids = [m.id for m in messages]
        await self.session.execute(
            update(Message).where(self._mine(Message), Message.id.in_(ids)).values(in_context=False)
        )
        for message in messages:
            message.in_context = False
        await self._changed()

    async def clear(self) -> None:
        """Erase the agent's memory: messages, summaries, passages, blocks. Its events stay:
        they are what the member sent and what is owed to them, not memory. A message
        acknowledged but not yet answered (stored before or during a replacing import) is
        answered afterwards, with the new memory, and a file not yet answered keeps its
        passages for that answer; replies not yet delivered still find their way back; a
        platform's redelivery of an answered message is still recognised."""
        for model in (Message, MessageTerm, MessageWord, Summary, Block):
            await self.session.execute(delete(model).where(self._mine(model)))
        unanswered = select(Event.id).where(
            self._mine(Event), Event.status.in_([EventStatus.PENDING, EventStatus.WAITING])
        )
        await self.session.execute(
            terms.counted_delete(
                delete(Passage).where(
                    self._mine(Passage),
                    Passage.event_id.is_(None) | Passage.event_id.not_in(unanswered),
                )
            )
        )
        await self._changed()

    async def forget_exchanges(self) -> None:
        """Back to a past that was imported: every message an event brought and every
        summary go (how `companion eval` gives each question the same memory)."""
        await self.session.execute(
            delete(Message).where(self._mine(Message), Message.event_id.is_not(None))
        )
        await terms.rebuild(self.session, self.scope)
        await self.session.execute(delete(Summary).where(self._mine(Summary)))
        await self._changed()

    async def latest_summary(self) -> Summary | None:
        return await self.session.scalar(
            select(Summary).where(self._mine(Summary)).order_by(Summary.id.desc()).limit(1)
        )

    async def add_summary(self, text: str, covers: int, tokens: int, now: datetime) -> Summary:
        summary = Summary(
            tenant_id=self.scope.tenant_id,
            agent_id=self.scope.agent_id,
            text=text,
            covers_messages=covers,
            tokens=tokens,
            created_at=now,
        )
        self.session.add(summary)
        await self.session.flush()
        await self._changed()
        return summary

    async def add_passage(
        self,
        text: str,
        now: datetime,
        source: str | None = None,
        embedding: Any = None,
        event_id: int | None = None,
    ) -> Passage:
        passage = Passage(
            tenant_id=self.scope.tenant_id,
            agent_id=self.scope.agent_id,
            text=text,
            source=source,
            created_at=now,
            event_id=event_id,
        )
        self.session.add(passage)
        await self.session.flush()
        # Its vector beside it; without one yet, the embedding worker fills it after commit.
        self.session.add(
            PassageVector(
                tenant_id=self.scope.tenant_id,
                agent_id=self.scope.agent_id,
                passage_id=passage.id,
                embedding=embedding,
            )
        )
        await self.session.flush()
        await terms.list_passage(self.session, self.scope, passage.id)
        self.passages_added += 1
        return passage

    async def replies_to(self, event_id: int) -> list[str]:
        """What the agent already answered to an event (a turn resumed after a crash)."""
        rows = await self.session.scalars(
            select(Reply.text)
            .where(self._mine(Reply), Reply.event_id == event_id)
            .order_by(Reply.id)
        )
        return list(rows)

    async def add_usage(
        self, day: date, tokens: int, calls: int, cached_tokens: int, completion_tokens: int
    ) -> None:
        """Add model calls' cost to the agent's row for the day (what budgets count)."""
        if not tokens and not calls:
            return
        added = {
            "tokens": tokens,
            "calls": calls,
            "cached_tokens": cached_tokens,
            "completion_tokens": completion_tokens,
        }
        statement = upsert(Usage).values(
            agent_id=self.scope.agent_id, day=day, tenant_id=self.scope.tenant_id, **added
        )
        await self.session.execute(
            statement.on_conflict_do_update(
                index_elements=[Usage.tenant_id, Usage.agent_id, Usage.day],
                set_={name: getattr(Usage, name) + amount for name, amount in added.items()},
            )
        )

    async def add_outbox(self, text: str, event_id: int | None, now: datetime) -> None:
        self.session.add(
            Reply(
                tenant_id=self.scope.tenant_id,
                agent_id=self.scope.agent_id,
                event_id=event_id,
                text=text,
                created_at=now,
            )
        )
