"""Main-context assembly: plain values in, the list of chat messages out.

Order, as in the MemGPT paper: system instructions (with the budget line), working-context
blocks, then the FIFO queue with the recursive summary in slot 0. Stored messages become
chat messages here (`render`); system alerts travel as user-role messages tagged
`[system alert]`, because many OpenAI-compatible servers refuse a second system message.

Every part has a bound, whatever the database holds: a message shows at most
`max_message_tokens` of its text and each function call at most `MAX_ARGUMENT_CHARS` of
arguments, the summary at most `max_summary_tokens`, working context at most a quarter of
the window. `message_tokens` is what a stored message costs in the prompt: the FIFO queue's
count, made by `AgentStore` for every message it stores.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.memory.tokens import PROMPT_OVERHEAD, TokenCounter, truncate_to_tokens
from core.models import Block, Message

MAX_ARGUMENT_CHARS = 8000

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


def _block_section(blocks: Sequence[Block], max_tokens: int) -> str:
    """The blocks, each cut to an equal share of `max_tokens` if together they exceed it."""
    total = sum(TokenCounter.count(b.value) for b in blocks)
    share = max_tokens // max(len(blocks), 1) if total > max_tokens else max_tokens
    parts = []
    for block in sorted(blocks, key=lambda b: (b.label != "persona", b.label)):
        value = _cut(block.value, share, "its full text is too long to show")
        parts.append(
            f'<{block.label} characters="{len(block.value)}/{block.char_limit}">\n'
            f"{value}\n</{block.label}>"
        )
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


def status_line(
    used: int, window: int, now: datetime, timezone: str, recall: int, archival: int
) -> str:
    return (
        f"Status: {used} of {window} tokens in use ({100 * used // window}%). "
        f"Now: {now.strftime('%A %Y-%m-%d %H:%M')} ({timezone}). "
        f"Out of view: {recall} older messages in recall storage, "
        f"{archival} passages in archival storage."
    )


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


def message_tokens(message: Message, max_tokens: int) -> int:
    """What a stored message costs in the prompt, as `render` shows it (unscaled)."""
    return TokenCounter.count_message(render(message, max_tokens))


def summary_message(summary: str, covers: int, max_tokens: int) -> dict[str, Any]:
    text = truncate_to_tokens(summary, max_tokens)
    return {
        "role": "user",
        "content": f"[system alert] Summary of the {covers} earlier messages no longer in "
        f"view (full text in recall storage):\n{text}",
    }


def assemble(
    *,
    blocks: Sequence[Block],
    summary: tuple[str, int] | None,
    queue: Sequence[dict[str, Any]],
    queue_tokens: int,
    tools_tokens: int,
    counter: TokenCounter,
    window: int,
    max_summary_tokens: int,
    now: datetime,
    timezone: str,
    recall: int,
    archival: int,
) -> tuple[list[dict[str, Any]], int, int]:
    """The prompt and its token count, calibrated and raw (tools included).

    `queue` is the FIFO queue rendered, `queue_tokens` its count; the rest is bounded here.
    """
    head = f"{INSTRUCTIONS}\n\n{_block_section(blocks, window // 4)}"
    messages: list[dict[str, Any]] = []
    if summary is not None:
        messages.append(summary_message(*summary, max_summary_tokens))
    messages.extend(queue)
    fixed = counter.count_message({"content": head}) + tools_tokens + PROMPT_OVERHEAD
    fixed += sum(counter.count_message(m) for m in messages[: 1 if summary else 0])
    placeholder = status_line(window, window, now, timezone, recall, archival)
    raw = fixed + queue_tokens + counter.count(placeholder) + 2
    used = counter.scale(raw)
    system = f"{head}\n\n{status_line(used, window, now, timezone, recall, archival)}"
    return [{"role": "system", "content": system}, *messages], used, raw
