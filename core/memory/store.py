"""Reads and writes of one agent's memory, always inside that agent's scope.

`AgentStore` wraps a session and a `Scope` (tenant id, agent id); every query it makes
filters on both. Search lives in `core.memory.search`; whole-agent data moves in
`core.members.portability`.

It is the one place a message enters the FIFO queue, so it counts every message it stores
(`prompt.message_tokens`, for the deployment's `max_message_tokens`), whatever the path:
a turn, a refused or failed event, an import. Reading the queue back counts again: a row
stored before every path counted, or counted for another window, is repaired, never
trusted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from core.errors import BlockRefused
from core.memory.prompt import message_tokens
from core.models import Agent, Block, Message, Passage, Reply, Summary
from core.scope import Scope


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


class AgentStore:
    def __init__(self, session: AsyncSession, scope: Scope, max_message_tokens: int) -> None:
        self.session = session
        self.scope = scope
        self.max_message_tokens = max_message_tokens

    def _mine(self, model: Any) -> Any:
        return (model.tenant_id == self.scope.tenant_id) & (model.agent_id == self.scope.agent_id)

    async def lock_agent(self) -> Agent:
        """Row-lock the agent for this transaction: one turn at a time, across processes.

        FOR NO KEY UPDATE, not FOR UPDATE: inserting an event that references the agent
        (its foreign key takes KEY SHARE) must not wait for the turn to end.
        """
        agent = await self.session.scalar(
            select(Agent)
            .where(Agent.id == self.scope.agent_id, Agent.tenant_id == self.scope.tenant_id)
            .with_for_update(key_share=True)
        )
        assert agent is not None, f"agent {self.scope.agent_id} vanished"
        return agent

    async def blocks(self) -> dict[str, Block]:
        rows = await self.session.scalars(select(Block).where(self._mine(Block)))
        return {block.label: block for block in rows}

    def _count(self, message: Message) -> int:
        return message_tokens(message, self.max_message_tokens)

    async def in_context(self) -> list[Message]:
        """The FIFO queue, oldest first, each message recounted (a wrong count is repaired)."""
        rows = list(
            await self.session.scalars(
                select(Message).where(self._mine(Message), Message.in_context).order_by(Message.id)
            )
        )
        # Tokenizing a long queue is CPU work: off the event loop.
        counts = await asyncio.to_thread(lambda: [self._count(m) for m in rows])
        for message, tokens in zip(rows, counts, strict=True):
            if message.tokens != tokens:
                message.tokens = tokens
        return rows

    async def append(self, now: datetime, **fields: Any) -> Message:
        """Store a message, in the FIFO queue unless `in_context=False`, and count it."""
        fields.setdefault("in_context", True)
        message = Message(
            tenant_id=self.scope.tenant_id, agent_id=self.scope.agent_id, created_at=now, **fields
        )
        message.tokens = self._count(message)
        self.session.add(message)
        await self.session.flush()
        return message

    async def evict(self, messages: Sequence[Message]) -> None:
        ids = [m.id for m in messages]
        await self.session.execute(
            update(Message).where(self._mine(Message), Message.id.in_(ids)).values(in_context=False)
        )
        for message in messages:
            message.in_context = False

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
        return summary

    async def add_passage(
        self, text: str, now: datetime, source: str | None = None, embedding: Any = None
    ) -> Passage:
        passage = Passage(
            tenant_id=self.scope.tenant_id,
            agent_id=self.scope.agent_id,
            text=text,
            source=source,
            embedding=embedding,
            created_at=now,
        )
        self.session.add(passage)
        await self.session.flush()
        return passage

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

    async def passage_count(self) -> int:
        return int(await self.session.scalar(select(func.count()).where(self._mine(Passage))) or 0)
