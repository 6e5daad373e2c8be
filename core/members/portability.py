"""A member's whole memory as one JSON document, and back.

`export_agent` writes every block, message (in order, with timestamps and whether it is in
the FIFO queue), summary, archival passage and pending event. `import_agent` restores such a
document into an agent, keeping timestamps; it refuses to mix into an agent that already has
memory unless told to replace it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import EngineConfig
from core.errors import BadExport, ImportConflict
from core.events import EventStatus, clean_text
from core.memory.prompt import render
from core.memory.store import AgentStore
from core.memory.tokens import TokenCounter
from core.models import Agent, Block, Event, Message, Passage, Summary, Tenant, User
from core.ports import Embedder
from core.scope import Scope, enter_scope

FORMAT = "companion-export"
ROLES = ("user", "assistant", "tool", "system")
VERSION = 1


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


async def export_agent(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    await enter_scope(session, scope)

    def mine(model: Any) -> Any:
        return (model.tenant_id == scope.tenant_id) & (model.agent_id == scope.agent_id)

    who = (
        await session.execute(
            select(Tenant.key, User.external_id, User.display_name, User.timezone)
            .join(User, User.tenant_id == Tenant.id)
            .join(Agent, Agent.user_id == User.id)
            .where(Agent.id == scope.agent_id, Agent.tenant_id == scope.tenant_id)
        )
    ).one()
    blocks = await session.scalars(select(Block).where(mine(Block)).order_by(Block.label))
    messages = await session.scalars(select(Message).where(mine(Message)).order_by(Message.id))
    summaries = list(
        await session.scalars(select(Summary).where(mine(Summary)).order_by(Summary.id))
    )
    passages = await session.scalars(select(Passage).where(mine(Passage)).order_by(Passage.id))
    events = await session.scalars(
        select(Event).where(mine(Event), Event.status == EventStatus.PENDING).order_by(Event.id)
    )
    return {
        "format": FORMAT,
        "version": VERSION,
        "tenant": who.key,
        "user": who.external_id,
        "display_name": who.display_name,
        "timezone": who.timezone,
        "blocks": [{"label": b.label, "value": b.value, "limit": b.char_limit} for b in blocks],
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "created_at": _iso(m.created_at),
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "search_text": m.search_text,
                "in_context": m.in_context,
            }
            for m in messages
        ],
        "summary": summaries[-1].text if summaries else None,
        "summaries": [
            {"text": s.text, "covers_messages": s.covers_messages, "created_at": _iso(s.created_at)}
            for s in summaries
        ],
        "passages": [
            {"text": p.text, "source": p.source, "created_at": _iso(p.created_at)} for p in passages
        ],
        "pending_events": [
            {"kind": e.kind, "payload": e.payload, "created_at": _iso(e.created_at)} for e in events
        ],
    }


def _when(item: dict[str, Any], where: str) -> datetime:
    try:
        value = datetime.fromisoformat(str(item["created_at"]))
    except (KeyError, ValueError):
        raise BadExport(f"{where}: created_at is missing or not an ISO-8601 time") from None
    if value.tzinfo is None:
        raise BadExport(f"{where}: created_at has no time zone")
    return value


def _check(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadExport('this is not a Companion export (no "format": "companion-export")')
    if doc.get("version") != VERSION:
        raise BadExport(f"export version {doc.get('version')!r} is not supported (want {VERSION})")
    for key in ("blocks", "messages", "passages"):
        if not isinstance(doc.get(key), list):
            raise BadExport(f"the export has no list of {key}")
    return doc


async def _has_memory(session: AsyncSession, scope: Scope) -> int:
    count = await session.scalar(
        select(func.count()).where(
            Message.tenant_id == scope.tenant_id, Message.agent_id == scope.agent_id
        )
    )
    passages = await session.scalar(
        select(func.count()).where(
            Passage.tenant_id == scope.tenant_id, Passage.agent_id == scope.agent_id
        )
    )
    return int(count or 0) + int(passages or 0)


async def clear_memory(session: AsyncSession, scope: Scope) -> None:
    for model in (Message, Summary, Passage, Block, Event):
        await session.execute(
            delete(model).where(
                model.tenant_id == scope.tenant_id, model.agent_id == scope.agent_id
            )
        )


async def import_agent(
    session: AsyncSession,
    scope: Scope,
    doc: Any,
    config: EngineConfig,
    now: datetime,
    embedder: Embedder | None = None,
    replace: bool = False,
) -> dict[str, int]:
    """Restore an export into the agent at `scope`; returns what was restored, by kind."""
    doc = _check(doc)
    try:
        return await _restore(session, scope, doc, config, now, embedder, replace)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise BadExport(f"the export is damaged ({type(error).__name__}: {error})") from None


async def _restore(
    session: AsyncSession,
    scope: Scope,
    doc: dict[str, Any],
    config: EngineConfig,
    now: datetime,
    embedder: Embedder | None,
    replace: bool,
) -> dict[str, int]:
    existing = await _has_memory(session, scope)
    if existing and not replace:
        raise ImportConflict(scope.agent_id, existing)
    await clear_memory(session, scope)
    store = AgentStore(session, scope)
    for i, block in enumerate(doc["blocks"]):
        if not isinstance(block, dict) or not isinstance(block.get("value"), str):
            raise BadExport(f"blocks[{i}] has no text value")
        raw_limit = block.get("limit") or config.human_limit
        if not isinstance(raw_limit, int) or isinstance(raw_limit, bool):
            raise BadExport(f"blocks[{i}] has a limit that is not a whole number")
        limit = raw_limit
        session.add(
            Block(
                tenant_id=scope.tenant_id,
                agent_id=scope.agent_id,
                label=str(block["label"]),
                value=clean_text(block["value"]),
                char_limit=max(limit, len(block["value"])),  # an import never cuts a block
            )
        )
    counter = TokenCounter()
    for i, item in enumerate(doc["messages"]):
        if not isinstance(item, dict) or item.get("role") not in ROLES:
            raise BadExport(f"messages[{i}] has no valid role")
        if not isinstance(item.get("content"), str | None):
            raise BadExport(f"messages[{i}] has content that is not text")
        await store.append(
            _when(item, f"messages[{i}]"),
            lambda m: counter.count_message(render(m, config.max_message_tokens)),
            role=item["role"],
            content=clean_text(item["content"]) if item.get("content") is not None else None,
            tool_calls=item.get("tool_calls"),
            tool_call_id=item.get("tool_call_id"),
            search_text=item.get("search_text")
            if "search_text" in item
            else (item.get("content") if item["role"] == "user" else None),
            in_context=bool(item.get("in_context", False)),
        )
    for i, item in enumerate(doc.get("summaries") or []):
        await store.add_summary(
            item["text"],
            int(item.get("covers_messages", 0)),
            counter.count(item["text"]) + 40,
            _when(item, f"summaries[{i}]"),
        )
    if isinstance(doc.get("summary"), str) and not doc.get("summaries"):
        covered = sum(1 for m in doc["messages"] if not m.get("in_context", False))
        await store.add_summary(doc["summary"], covered, counter.count(doc["summary"]) + 40, now)
    texts = [p.get("text") for p in doc["passages"]]
    if not all(isinstance(t, str) and t for t in texts):
        raise BadExport("every passage needs a non-empty text")
    vectors: list[Any] = [None] * len(texts)
    if embedder is not None:
        for start in range(0, len(texts), 64):
            vectors[start : start + 64] = await embedder.embed(texts[start : start + 64])
    for i, (item, vector) in enumerate(zip(doc["passages"], vectors, strict=True)):
        await store.add_passage(
            clean_text(item["text"]), _when(item, f"passages[{i}]"), item.get("source"), vector
        )
    await session.flush()
    return {
        "blocks": len(doc["blocks"]),
        "messages": len(doc["messages"]),
        "passages": len(doc["passages"]),
    }
