"""The agent's functions, as in the MemGPT paper's reference implementation.

Each tool is one typed async function; its signature (types and caps) and docstring are its
JSON schema and its validation (`core.memory.executor`). The first parameter is always the
`ToolContext`, which binds the call to the calling agent: no tool takes a user or tenant
argument, so nothing a member says can reach another member's memory. A tool reports a
problem by raising `ToolError`; the executor hands the message back to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Annotated

from pydantic import Field

from core.config import EngineConfig
from core.errors import BlockRefused, EmbeddingError, ToolError
from core.events import MAX_EVENT_CHARS
from core.memory.dates import days_named
from core.memory.embeddings import closeness_of, query_vector
from core.memory.prompt import for_member
from core.memory.ranking import as_said_by, clean_query, named_speaker
from core.memory.search import Page, archival_search, recall_by_date, recall_search
from core.memory.store import AgentStore, write_block
from core.models import Block
from core.ports import Embedder

SNIPPET_CHARS = 400
MAX_QUERY_CHARS = 1_000
MAX_NAME_CHARS = 100
MAX_PAGE = 100_000
# One reply: far more than a model writes within its answer's token budget, few enough
# platform posts (Discord: 6) that a runaway model cannot flood a channel.
MAX_REPLY_CHARS = 12_000

# Every argument has a cap. Text to keep may be as long as a member's message; a reply is
# bounded by what a member should ever receive at once; queries, labels and dates are short.
Text = Annotated[str, Field(max_length=MAX_EVENT_CHARS)]
Reply = Annotated[str, Field(max_length=MAX_REPLY_CHARS)]
Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
PageNumber = Annotated[int, Field(le=MAX_PAGE)]


@dataclass
class ToolContext:
    store: AgentStore
    blocks: dict[str, Block]
    config: EngineConfig
    now: datetime
    timezone: str = "UTC"
    embedder: Embedder | None = None
    event_id: int | None = None
    may_send: bool = True
    sent: list[str] = field(default_factory=list)
    refused_sends: int = 0  # send_message calls over the per-turn cap: the turn ends
    # Left out of search queries; a query naming one of them prefers that one's messages.
    member_name: str | None = None
    agent_name: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.member_name, self.agent_name) if n)


def _block(ctx: ToolContext, label: str) -> Block:
    if label not in ctx.blocks:
        raise ToolError(
            f"there is no block {label!r}; the blocks are: {', '.join(sorted(ctx.blocks))}"
        )
    return ctx.blocks[label]


def _set_block(ctx: ToolContext, block: Block, value: str) -> str:
    try:
        write_block(block, value, ctx.now)
    except BlockRefused as error:
        raise ToolError(
            f"{error}; make room with core_memory_replace (or move details to archival "
            "memory) and try again"
        ) from None
    return f"Block {block.label!r} now has {len(value)} of {block.char_limit} characters."


# Chinese, Japanese and Korean, written without spaces (as migration 0028 reads them).
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]{2,}")


_KANA = re.compile(r"[\u3040-\u309f]+")  # hiragana: particles and endings in Japanese


def _query_parts(query: str) -> list[str]:
    """What to look for in a hit's text: the start of each word of three letters or more,
    and each pair of neighbouring characters of a run without spaces (a name inside it)
    but for pairs of hiragana alone."""
    lowered = query.lower()
    parts = [w[:5] for w in re.findall(r"\w{3,}", _UNSPACED.sub(" ", lowered))]
    for run in _UNSPACED.findall(lowered):
        pairs = (run[i : i + 2] for i in range(len(run) - 1))
        parts += [pair for pair in pairs if not _KANA.fullmatch(pair)]  # not "につ", "いて"
    return parts


def snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """At most `limit` characters of `text`, around the first place a query word appears."""
    if len(text) <= limit:
        return text
    lowered = text.lower()
    hits = [at for at in (lowered.find(part) for part in _query_parts(query)) if at >= 0]
    start = max(0, min(min(hits, default=0) - limit // 3, len(text) - limit))
    return (
        ("…" if start else "")
        + text[start : start + limit]
        + ("…" if start + limit < len(text) else "")
    )


def _format_page(page: Page, what: str, query: str = "", nothing: str = "") -> str:
    if page.total == 0:
        return nothing or f"No {what}."
    if page.page > page.pages:
        raise ToolError(f"page {page.page} is out of range: there are {page.pages} pages")
    told = f"the best {page.total} of {page.matched}" if page.matched else f"{page.total}"
    lines = [f"Showing {what}: page {page.page} of {page.pages} ({told} results)."]
    for hit in page.hits:
        when = hit.created_at.strftime("%Y-%m-%d %H:%M")
        label = f" {hit.kind}" if hit.kind else ""
        lines.append(f"- [{when}{label}] {snippet(hit.text, query)}")
    if page.page < page.pages:
        lines.append(f"More: call again with page={page.page + 1}.")
    return "\n".join(lines)


def _nothing(query: str, what: str, note: str, ctx: ToolContext) -> str:
    """What the model is told when a search matched nothing: plainly, and why."""
    how = (
        "share its words"
        if note or ctx.embedder is None
        else ("share its words or come close to its meaning")
    )
    return f"Nothing matched {_quoted(query)}: no {what} {how}."


def _quoted(query: str) -> str:
    query = " ".join(query.split())
    return f'"{query[:80]}…"' if len(query) > 80 else f'"{query}"'


def _page_number(page: int) -> int:
    if page < 0:
        raise ToolError(f"page must be 1 or more, got {page}")
    return max(page, 1)  # page 0 is the reference implementation's first page


def _parse_date(value: str, name: str) -> date:
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"{name} must be a date as YYYY-MM-DD, got {value!r}") from None


async def send_message(ctx: ToolContext, message: Reply) -> str:
    """Send a message to the person. This is the only thing they see; it ends your turn.

    message: the text to send (markdown is fine)
    """
    if not message.strip():
        raise ToolError("message is empty; write what you want to say")
    message = for_member(message)
    if not message:
        raise ToolError(
            "not sent: the person never sees system alerts; write your own words to them"
        )
    if not ctx.may_send:
        raise ToolError("you cannot message the person now (memory upkeep); just tidy memory")
    if len(ctx.sent) >= ctx.config.max_sends:
        ctx.refused_sends += 1
        raise ToolError(
            f"not sent: you already sent {len(ctx.sent)} messages this turn, the most a turn "
            "may send; your turn ends here"
        )
    ctx.sent.append(message)
    return "Sent."


async def core_memory_append(
    ctx: ToolContext, label: Name, content: Text, request_heartbeat: bool = False
) -> str:
    """Add a line to a block of your working context (always in view, size-limited).

    label: the block: `persona` (who you are) or `human` (facts about this person)
    content: the text to add
    request_heartbeat: true to run again right after this call
    """
    if not content.strip():
        raise ToolError("content is empty")
    block = _block(ctx, label)
    value = f"{block.value}\n{content}" if block.value else content
    return _set_block(ctx, block, value)


async def core_memory_replace(
    ctx: ToolContext,
    label: Name,
    old_content: Text,
    new_content: Text,
    request_heartbeat: bool = False,
) -> str:
    """Replace text in a block of your working context; an empty new_content deletes it.

    label: the block: `persona` or `human`
    old_content: the exact text to replace
    new_content: the text to put in its place
    request_heartbeat: true to run again right after this call
    """
    block = _block(ctx, label)
    if not old_content or old_content not in block.value:
        raise ToolError(f"old_content was not found in block {label!r}; copy it exactly")
    return _set_block(ctx, block, block.value.replace(old_content, new_content))


async def _query_vector(ctx: ToolContext, query: str) -> tuple[list[float] | None, str]:
    """The query's embedding, or None and a note saying the search used key words only."""
    if ctx.embedder is None:
        return None, ""
    try:
        return await query_vector(ctx.embedder, query), ""
    except EmbeddingError as error:
        return None, f"(Searched by key words: {error}.)\n"


async def find_messages(ctx: ToolContext, query: str, page: int = 1) -> tuple[Page, str]:
    """What `conversation_search` finds: the page, and a note when meaning was not used."""
    cleaned = clean_query(query, ctx.names)
    speaker = named_speaker(query, ctx.member_name, ctx.agent_name)
    # the meaning of what the named person would have said ("what did I research?"),
    # the key words of the query without names
    named = {"user": ctx.member_name, "assistant": ctx.agent_name}.get(speaker or "")
    meaning = as_said_by(query, named) or cleaned
    embedding, note = await _query_vector(ctx, meaning)
    store = ctx.store
    size = ctx.config.page_size
    found = await recall_search(
        store.session,
        store.scope,
        cleaned,
        page,
        size,
        ctx.event_id,
        embedding,
        speaker,
        closeness_of(ctx.embedder),
        days_named(query),
        ctx.timezone,
    )
    return found, note


async def conversation_search(
    ctx: ToolContext, query: Query, page: PageNumber = 1, request_heartbeat: bool = False
) -> str:
    """Search all past messages, including those no longer in view, by key words and meaning.

    query: key words, names of things, or a paraphrase; name a person, or a day (8 May 2023)
    page: which page of results, from 1
    request_heartbeat: true to run again right after this call
    """
    if not query.strip():
        raise ToolError("query is empty")
    found, note = await find_messages(ctx, query, _page_number(page))
    return note + _format_page(found, "messages", query, _nothing(query, "messages", note, ctx))


async def conversation_search_date(
    ctx: ToolContext,
    start_date: Name,
    end_date: Name,
    page: PageNumber = 1,
    request_heartbeat: bool = False,
) -> str:
    """List past messages sent between two dates (inclusive), oldest first.

    start_date: first day, YYYY-MM-DD
    end_date: last day, YYYY-MM-DD
    page: which page of results, from 1
    request_heartbeat: true to run again right after this call
    """
    start = _parse_date(start_date, "start_date")
    end = _parse_date(end_date, "end_date")
    if end < start:
        raise ToolError(f"end_date {end} is before start_date {start}")
    store = ctx.store
    found = await recall_by_date(
        store.session,
        store.scope,
        start,
        end,
        ctx.timezone,
        _page_number(page),
        ctx.config.page_size,
    )
    return _format_page(found, f"messages from {start} to {end}")


async def archival_memory_insert(
    ctx: ToolContext, content: Text, request_heartbeat: bool = False
) -> str:
    """Store text in archival memory: unlimited, kept forever, found again by meaning.

    content: the text to store; make it self-contained
    request_heartbeat: true to run again right after this call
    """
    if not content.strip():
        raise ToolError("content is empty")
    embedding, note = None, ""
    if ctx.embedder is not None:
        try:
            embedding = (await ctx.embedder.embed([content]))[0]
        except EmbeddingError as error:
            note = f" (not embedded yet: {error}; it is kept and `companion reembed` indexes it)"
    await ctx.store.add_passage(content, ctx.now, source="agent", embedding=embedding)
    return "Stored in archival memory." + note


async def archival_memory_search(
    ctx: ToolContext, query: Query, page: PageNumber = 1, request_heartbeat: bool = False
) -> str:
    """Search archival memory by meaning and key words.

    query: what to look for
    page: which page of results, from 1
    request_heartbeat: true to run again right after this call
    """
    if not query.strip():
        raise ToolError("query is empty")
    cleaned = clean_query(query, ctx.names)
    embedding, note = await _query_vector(ctx, cleaned)
    store = ctx.store
    found = await archival_search(
        store.session,
        store.scope,
        cleaned,
        embedding,
        _page_number(page),
        ctx.config.page_size,
        closeness_of(ctx.embedder),
    )
    return note + _format_page(found, "passages", query, _nothing(query, "passages", note, ctx))


TOOLS = (
    send_message,
    core_memory_append,
    core_memory_replace,
    conversation_search,
    conversation_search_date,
    archival_memory_insert,
    archival_memory_search,
)
