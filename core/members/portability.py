"""A member's whole memory as one JSON document, and back.

`export_agent` writes every block, message (in order, with timestamps and whether it is in
the FIFO queue), summary, archival passage and pending event. `parse_export` reads such a
document into an `Export` (pydantic) or raises `BadExport` naming the place at fault, before
anything is written. `import_agent` restores an `Export` into an agent, keeping timestamps;
it refuses to mix into an agent that already has memory unless told to replace it, and a
replacement replaces the memory only: the agent's events (and so what is still owed to the
member) stay.

The `Export` model is the file format (versioned, and older or hand-made files omit keys),
not a second model of the tables: it stops at what a file may say.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from core.config import EngineConfig
from core.errors import BadExport, ImportConflict
from core.events import EventStatus, clean_text
from core.memory.bulk import fit_in_view, store_messages
from core.memory.store import AgentStore
from core.memory.tokens import TokenCounter
from core.memory.tools import MAX_NAME_CHARS
from core.models import Agent, Block, Event, Message, Passage, Summary, Tenant, User
from core.ports import Embedder, Progress
from core.scope import Scope, enter_scope
from core.tenant_key import MAX_ID_CHARS

FORMAT = "companion-export"
VERSION = 1


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


async def export_agent(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    await enter_scope(session, scope)

    def mine(model: Any) -> Any:
        return (model.tenant_id == scope.tenant_id) & (model.agent_id == scope.agent_id)

    who = (
        await session.execute(
            select(
                Tenant.key,
                User.external_id,
                User.display_name,
                User.timezone,
                User.settings,
                Agent.next_opener_at,
            )
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
        # The member's own choices (openers, quiet hours) and when the next opener is planned.
        "settings": dict(who.settings or {}),
        "next_opener_at": _iso(who.next_opener_at),
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


def _time(value: Any) -> datetime:
    """An ISO-8601 time with its zone, as `export_agent` writes it."""
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        when = None
    if isinstance(when, datetime) and when.tzinfo is not None:
        try:  # in UTC, as stored: 0001-01-01T00:00+05:00 is no time Python (or the driver) holds
            return when.astimezone(UTC)
        except OverflowError:
            pass
    got = repr(value)[:60]
    raise PydanticCustomError("time", "not an ISO-8601 time with a time zone: {got}", {"got": got})


def _name(value: str) -> str:
    """A name or id as it is stored: refused, not mended, when Postgres could not store it
    (a NUL, a lone surrogate), since a changed name would name someone else."""
    if clean_text(value) != value:
        raise PydanticCustomError(
            "name",
            "holds a NUL or a lone surrogate, which cannot be stored: {got}",
            {"got": repr(value)[:60]},
        )
    return value


def _id(value: str) -> str:
    """A tenant's key or a user's id: one Postgres can index."""
    if len(value) > MAX_ID_CHARS:
        raise PydanticCustomError(
            "id",
            "has {got} characters, the most an id may have is {most}",
            {"got": len(value), "most": MAX_ID_CHARS},
        )
    return value


Text = Annotated[str, AfterValidator(clean_text)]  # Postgres cannot store NUL bytes
Name = Annotated[str, AfterValidator(_name)]
Id = Annotated[str, AfterValidator(_name), AfterValidator(_id)]  # a tenant key, a user id
NonEmpty = Annotated[str, Field(min_length=1), AfterValidator(clean_text)]
Time = Annotated[datetime, BeforeValidator(_time)]
Count = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]  # a Postgres integer


class Part(BaseModel):
    """A piece of the document; keys it does not know are ignored."""


class BlockPart(Part):
    # As long as the model's functions may name (and Postgres can index: the key holds it).
    label: Annotated[
        str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(clean_text)
    ]
    value: Text
    limit: Count | None = None


class FunctionPart(Part):
    name: Text
    arguments: Text


class ToolCallPart(Part):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionPart


class MessagePart(Part):
    role: Literal["user", "assistant", "tool", "system"]
    content: Text | None = None
    created_at: Time
    tool_calls: list[ToolCallPart] | None = None
    tool_call_id: Text | None = None
    search_text: Text | None = None
    in_context: StrictBool = False

    @model_validator(mode="after")
    def _searchable(self) -> MessagePart:
        if "search_text" not in self.model_fields_set and self.role == "user":
            self.search_text = self.content  # older exports: what a member said is searchable
        return self


class SummaryPart(Part):
    text: Text
    covers_messages: Count = 0
    created_at: Time


class PassagePart(Part):
    text: NonEmpty
    source: Text | None = None
    created_at: Time


class Export(Part):
    format: Literal["companion-export"]
    version: Literal[1]
    tenant: Id | None = None
    user: Id | None = None
    display_name: Name | None = None
    blocks: list[BlockPart]
    messages: list[MessagePart]
    summary: Text | None = None  # the latest summary: all that a minimal file may carry
    summaries: list[SummaryPart] = []
    passages: list[PassagePart]

    @field_validator("blocks")
    @classmethod
    def _one_block_per_label(cls, blocks: list[BlockPart]) -> list[BlockPart]:
        labels = [block.label for block in blocks]
        for label in labels:
            if labels.count(label) > 1:
                raise PydanticCustomError(
                    "label", "two blocks are labelled {label}", {"label": label}
                )
        return blocks

    def all_summaries(self, now: datetime) -> list[SummaryPart]:
        """The summaries, or one made of `summary` alone, covering the evicted messages."""
        if self.summaries or self.summary is None:
            return self.summaries
        covered = sum(not m.in_context for m in self.messages)
        return [SummaryPart(text=self.summary, covers_messages=covered, created_at=now)]


def _place(error: ErrorDetails) -> str:
    """messages[3].created_at, from ('messages', 3, 'created_at')."""
    where = ""
    for step in error["loc"]:
        where += f"[{step}]" if isinstance(step, int) else f".{step}"
    return where.lstrip(".") or "the export"


def parse_export(doc: Any) -> Export:
    """The document as an `Export`, or `BadExport` saying where it is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadExport('this is not a Companion export (no "format": "companion-export")')
    if doc.get("version") != VERSION:
        raise BadExport(f"export version {doc.get('version')!r} is not supported (want {VERSION})")
    try:
        return Export.model_validate(doc)
    except ValidationError as error:
        first, *rest = error.errors(include_url=False)
        more = f" (and {len(rest)} more)" if rest else ""
        message = first["msg"][0].lower() + first["msg"][1:]
        raise BadExport(f"the export is damaged: {_place(first)}: {message}{more}") from None


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


async def import_agent(
    session: AsyncSession,
    scope: Scope,
    export: Export,
    config: EngineConfig,
    now: datetime,
    embedder: Embedder | None = None,
    replace: bool = False,
    progress: Progress | None = None,
    member: str | None = None,
) -> dict[str, int]:
    """Restore an export into the agent at `scope` (`member`, as a person names it);
    returns what was restored, by kind."""
    existing = await _has_memory(session, scope)
    if existing and not replace:
        raise ImportConflict(member or f"agent {scope.agent_id}", existing)
    store = AgentStore(session, scope, config.max_message_tokens)
    await store.clear()
    await _restore(store, export, config, now, embedder, progress or _quiet)
    return {
        "blocks": len(export.blocks),
        "messages": len(export.messages),
        "passages": len(export.passages),
    }


async def _restore(
    store: AgentStore,
    export: Export,
    config: EngineConfig,
    now: datetime,
    embedder: Embedder | None,
    progress: Progress,
) -> None:
    scope = store.scope
    total, done = len(export.messages) + len(export.passages), 0
    progress(0, total)
    for block in export.blocks:
        store.session.add(
            Block(
                tenant_id=scope.tenant_id,
                agent_id=scope.agent_id,
                label=block.label,
                value=block.value,
                # An import never cuts a block.
                char_limit=max(block.limit or config.human_limit, len(block.value)),
            )
        )
    if export.messages:
        rows = [item.model_dump() for item in export.messages]
        # More history in view than the window holds would cost the first turn a summary
        # call per page of it: what does not fit goes out of view now.
        fit_in_view(rows, config.target_tokens, config.max_message_tokens)
        await store_messages(store, rows, lambda stored: progress(stored, total))
        done = len(rows)
    for summary in export.all_summaries(now):
        tokens = TokenCounter.count(summary.text) + 40
        await store.add_summary(summary.text, summary.covers_messages, tokens, summary.created_at)
    texts = [passage.text for passage in export.passages]
    vectors: list[Any] = [None] * len(texts)
    if embedder is not None:
        for start in range(0, len(texts), 64):
            vectors[start : start + 64] = await embedder.embed(texts[start : start + 64])
    for passage, vector in zip(export.passages, vectors, strict=True):
        await store.add_passage(passage.text, passage.created_at, passage.source, vector)
        done += 1
        if done % 100 == 0:
            progress(done, total)
    await store.session.flush()
    progress(total, total)


def _quiet(done: int, total: int) -> None:
    pass
