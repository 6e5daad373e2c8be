"""Main-context assembly: plain values in, the list of chat messages out.

Order, as in the MemGPT paper: system instructions (with the community's own part, the
same for every member: `core.companion`) and working-context blocks, then the
FIFO queue with the recursive summary in slot 0, then a status alert (tokens in use, the
time, what is out of view). Everything but the status only grows between flushes and block
edits, so each prompt starts with the whole previous one but its status: what a provider's
prompt cache can serve. Stored messages become chat messages here (`render`, once per
message: an `Entry`); system alerts travel as user-role messages tagged `[system alert]`,
because many OpenAI-compatible servers refuse a second system message.

Every part has a bound, whatever the database holds: a message shows at most
`max_message_tokens` of its text and each function call at most `MAX_ARGUMENT_CHARS` of
arguments, the summary at most `max_summary_tokens`, working context at most a quarter of
the window, the community's instructions at most a sixteenth. `entry` renders a stored
message and counts what it costs in the prompt: the FIFO queue's count, made by `AgentStore`
for every message it stores, under the rules named by `count_basis`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from core.memory.tokens import PROMPT_OVERHEAD, TokenCounter, truncate_to_tokens
from core.models import Block, Message
from core.wire.shape import carry, conform

MAX_ARGUMENT_CHARS = 8000
# The rules `render` and `entry` count by: change it when they change, and every agent's
# queue is recounted once, at its next turn.
COUNT_RULES = "render-1"

INSTRUCTIONS = """\
You are a companion with long-term memory, talking with one person in a community chat.

How you run: you wake only for an event (their message, a system alert, something they did, \
or a scheduled moment) and act through functions. Talk to them with send_message; other text \
you write is private thinking. After any other function you run again at once to use its \
result; send_message ends your turn. If a call fails, read the error and fix the call.

Your memory:
- Working context (below) is always in view but small. When you learn something lasting \
about the person (name, likes, plans, people, feelings), save it with core_memory_append or \
core_memory_replace right away. Keep it tidy.
- Only recent messages stay in view; older ones are summarised at the top of the \
conversation and remain searchable with conversation_search (key words) and \
conversation_search_date.
- Archival memory holds notes and documents without limit: archival_memory_insert, \
archival_memory_search.
Before saying you don't know or don't remember something about them, search. On a \
"memory pressure" alert, save what matters now: the oldest messages will soon leave view."""


BlockValues = tuple[tuple[str, str, int], ...]  # (label, value, character limit) each


def _block_section(blocks: BlockValues, max_tokens: int) -> str:
    """The blocks, each cut to an equal share of `max_tokens` if together they exceed it."""
    total = sum(TokenCounter.count(value) for _, value, _ in blocks)
    share = max_tokens // max(len(blocks), 1) if total > max_tokens else max_tokens
    parts = []
    for label, value, limit in sorted(blocks, key=lambda b: (b[0] != "persona", b[0])):
        shown = _cut(value, share, "its full text is too long to show")
        parts.append(f'<{label} characters="{len(value)}/{limit}">\n{shown}\n</{label}>')
    return "Working context:\n" + "\n".join(parts)


def _cut(text: str, max_tokens: int, where: str) -> str:
    cut = truncate_to_tokens(text, max_tokens)
    if cut == text:
        return text
    return f"{cut}\n[... cut here: {len(text)} characters in all; {where}]"


def cut_arguments(arguments: str) -> str:
    """A function call's arguments, or a note of their size when they are too long to show."""
    if len(arguments) <= MAX_ARGUMENT_CHARS:
        return arguments
    return json.dumps({"cut": f"{len(arguments)} characters of arguments"})


def _shown_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if all(len(c["function"]["arguments"]) <= MAX_ARGUMENT_CHARS for c in calls):
        return calls
    return [
        {**c, "function": {**c["function"], "arguments": cut_arguments(c["function"]["arguments"])}}
        for c in calls
    ]


def status_message(
    used: int, window: int, now: datetime, timezone: str, recall: int, archival: int
) -> dict[str, Any]:
    """The alert that ends every prompt: what changes from call to call, kept last."""
    return {
        "role": "user",
        "content": f"[system alert] Status: {used} of {window} tokens in use "
        f"({100 * used // window}%). Now: {now.strftime('%A %Y-%m-%d %H:%M')} ({timezone}). "
        f"Out of view: {recall} older messages in recall storage, "
        f"{archival} passages in archival storage.",
    }


# An alert as a model may echo it: from its tag to the end of its paragraph.
_ALERT_ECHO = re.compile(r"\[system alert\][^\n]*(?:\n(?![ \t\r]*\n)[^\n]*)*", re.IGNORECASE)


def for_member(text: str) -> str:
    """What of a model's words a member may see: every alert the prompt carried (the status,
    a summary, a note), which small models copy into their answers, removed from its tag to
    the end of its paragraph. Empty when nothing else was said."""
    return re.sub(r"\n{3,}", "\n\n", _ALERT_ECHO.sub("", text)).strip()


def count_basis(max_message_tokens: int) -> str:
    """What a stored count depends on: the counting rules and the cut of a message."""
    return f"{COUNT_RULES}/{max_message_tokens}"


def render(message: Message, max_tokens: int) -> dict[str, Any]:
    """A stored message as a chat message, its text cut to `max_tokens` if longer."""
    content = _cut(message.content or "", max_tokens, "the full text is in recall storage")
    if message.role == "system":
        return {"role": "user", "content": f"[system alert] {content}"}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if message.role == "assistant" and message.tool_calls:
        calls = _shown_calls(message.tool_calls)
        return {"role": "assistant", "content": content or None, "tool_calls": calls}
    return {"role": message.role, "content": content}


@dataclass(frozen=True, slots=True)
class Entry:
    """A message of the FIFO queue, as the prompt shows it (rendered once)."""

    message: Message
    shown: dict[str, Any]

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def tokens(self) -> int:
        return self.message.tokens

    @property
    def tool_calls(self) -> object:
        return self.message.tool_calls


def message_tokens(message: Message, max_tokens: int) -> int:
    """What a stored message costs in the prompt, as `render` shows it (unscaled)."""
    return TokenCounter.count_message(render(message, max_tokens))


def counted(message: Message, max_tokens: int) -> Entry:
    """The message rendered, its `tokens` set to what that costs (unscaled)."""
    shown = render(message, max_tokens)
    message.tokens = TokenCounter.count_message(shown)
    return Entry(message, shown)


def summary_message(summary: str, covers: int, max_tokens: int) -> dict[str, Any]:
    text = truncate_to_tokens(summary, max_tokens)
    return {
        "role": "user",
        "content": f"[system alert] Summary of the {covers} earlier messages no longer in "
        f"view (full text in recall storage):\n{text}",
    }


@dataclass(frozen=True)
class Head:
    """The system message (instructions and working context) and its tokens (unscaled)."""

    content: str
    tokens: int

    @property
    def message(self) -> dict[str, Any]:
        return {"role": "system", "content": self.content}


def _community_section(name: str, instructions: str, max_tokens: int) -> str:
    """What every member's agent reads of its community (`core.companion`), same for all."""
    parts = [f"Your name in this community is {name}."] if name else []
    if instructions:
        shown = _cut(instructions, max_tokens, "the rest is not shown")
        parts.append(
            "The community's admins give every member's companion these instructions. Follow "
            "them; they are read-only (no function changes them) and are not about this person:"
            f"\n<community>\n{shown}\n</community>"
        )
    return "".join(f"{part}\n\n" for part in parts)


def head(blocks: Sequence[Block], window: int, community: tuple[str, str] = ("", "")) -> Head:
    """The system message for these blocks and the community's (name, instructions):
    built and counted once per set of values."""
    return _head(tuple((b.label, b.value, b.char_limit) for b in blocks), window, community)


@lru_cache(maxsize=4096)
def _head(blocks: BlockValues, window: int, community: tuple[str, str]) -> Head:
    shared = _community_section(*community, window // 16)
    content = f"{INSTRUCTIONS}\n\n{shared}{_block_section(blocks, window // 4)}"
    return Head(content, TokenCounter.count_message({"content": content}))


@dataclass(frozen=True)
class Assembled:
    """A prompt ready to send, its tokens (calibrated, and our own count) and the repairs
    its shaping made (by kind)."""

    prompt: list[dict[str, Any]]
    tokens: int
    raw: int
    repairs: Mapping[str, int]


def assemble(
    *,
    head: Head,
    summary: tuple[dict[str, Any], int] | None,
    queue: Sequence[dict[str, Any]],
    queue_tokens: int,
    tools_tokens: int,
    counter: TokenCounter,
    window: int,
    now: datetime,
    timezone: str,
    recall: int,
    archival: int,
) -> Assembled:
    """The prompt in the wire's one shape (`core.wire.shape`) and its token count.

    `summary` is the summary's message and tokens, `queue` the FIFO queue rendered and
    `queue_tokens` its count; only the status alert, carried in the last message, is made
    here. The count stays an upper bound: merging messages only saves their framing, and
    what shaping adds is counted.
    """
    prompt = [head.message]
    fixed = head.tokens + tools_tokens + PROMPT_OVERHEAD + queue_tokens
    if summary is not None:
        prompt.append(summary[0])
        fixed += summary[1]
    prompt.extend(queue)
    shaped = conform(prompt)
    widest = status_message(window, window, now, timezone, recall, archival)
    raw = fixed + shaped.added + counter.count_message(widest)
    used = counter.scale(raw)
    status = status_message(used, window, now, timezone, recall, archival)["content"]
    return Assembled(carry(shaped.messages, status), used, raw, shaped.repairs)
