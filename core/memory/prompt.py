"""Main-context assembly: plain values in, the list of chat messages out.

Order, as in the MemGPT paper: system instructions (with the budget line), working-context
blocks, then the FIFO queue with the recursive summary in slot 0. Stored messages become
chat messages here (`render`); system alerts travel as user-role messages tagged
`[system alert]`, because many OpenAI-compatible servers refuse a second system message.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.memory.tokens import PROMPT_OVERHEAD, TokenCounter, truncate_to_tokens
from core.models import Block, Message

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


def _block_section(blocks: Sequence[Block]) -> str:
    parts = []
    for block in sorted(blocks, key=lambda b: (b.label != "persona", b.label)):
        parts.append(
            f'<{block.label} characters="{len(block.value)}/{block.char_limit}">\n'
            f"{block.value}\n</{block.label}>"
        )
    return "Working context:\n" + "\n".join(parts)


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
    content = message.content or ""
    cut = truncate_to_tokens(content, max_tokens)
    if cut != content:
        content = (
            f"{cut}\n[... cut here: {len(message.content or '')} characters in all; "
            "the full text is in recall storage]"
        )
    if message.role == "system":
        return {"role": "user", "content": f"[system alert] {content}"}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if message.role == "assistant" and message.tool_calls:
        return {"role": "assistant", "content": content or None, "tool_calls": message.tool_calls}
    return {"role": message.role, "content": content}


def summary_message(summary: str, covers: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": f"[system alert] Summary of the {covers} earlier messages no longer in "
        f"view (full text in recall storage):\n{summary}",
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
    now: datetime,
    timezone: str,
    recall: int,
    archival: int,
) -> tuple[list[dict[str, Any]], int]:
    """The prompt and its estimated token count (calibrated, tools included)."""
    head = f"{INSTRUCTIONS}\n\n{_block_section(blocks)}"
    messages: list[dict[str, Any]] = []
    if summary is not None:
        messages.append(summary_message(*summary))
    messages.extend(queue)
    fixed = counter.count_message({"content": head}) + tools_tokens + PROMPT_OVERHEAD
    fixed += sum(counter.count_message(m) for m in messages[: 1 if summary else 0])
    placeholder = status_line(window, window, now, timezone, recall, archival)
    raw = fixed + queue_tokens + counter.count(placeholder) + 2
    used = counter.scale(raw)
    system = f"{head}\n\n{status_line(used, window, now, timezone, recall, archival)}"
    return [{"role": "system", "content": system}, *messages], used
