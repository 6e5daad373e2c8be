"""Recursive summaries: the old summary plus the evicted messages make the new one.

A separate model call, with no tools, through the turn's metered model (so budgets and
metrics see it). Its input is kept inside the window by folding the evicted messages in
chunks, after the old summary cut to a summary's size. If the model fails or answers with
nothing, the summary falls back to the old one plus a plain note of what was evicted: a
summary is never lost, and the messages themselves stay in recall storage either way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from core.config import EngineConfig
from core.errors import ModelError
from core.events import clean_text
from core.memory.tokens import TokenCounter, truncate_to_tokens
from core.models import Message
from core.ports import ChatModel

log = logging.getLogger(__name__)

SUMMARIZER = """\
You keep the running summary of a long conversation between an AI companion and one person. \
Merge the previous summary and the new messages into one summary of at most {words} words. \
Keep lasting facts about the person (names, dates, preferences, plans, people, feelings), \
what was promised or left open, and when things happened. Drop small talk. \
Write plain prose, no preamble."""


def transcript_line(message: Message, max_chars: int = 1500) -> str:
    when = message.created_at.strftime("%Y-%m-%d %H:%M")
    if message.role == "tool":
        return f"[{when}] (function result) {(message.content or '')[:200]}"
    if message.role == "assistant":
        said = message.search_text or ""
        thought = message.content or ""
        text = f"{said} (thinking: {thought})" if said and thought else said or thought
        names = ", ".join(c["function"]["name"] for c in message.tool_calls or ())
        if names and not said:
            text = f"{text} (called {names})".strip()
        return f"[{when}] companion: {text[:max_chars]}"
    speaker = "person" if message.role == "user" else "system"
    return f"[{when}] {speaker}: {(message.content or '')[:max_chars]}"


def _chunks(lines: Sequence[str], counter: TokenCounter, limit: int) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    used = 0
    for line in lines:
        line = truncate_to_tokens(line, limit)
        n = counter.count(line) + 1
        if chunks[-1] and used + n > limit:
            chunks.append([])
            used = 0
        chunks[-1].append(line)
        used += n
    return chunks


async def summarize(
    model: ChatModel,
    counter: TokenCounter,
    config: EngineConfig,
    previous: str | None,
    evicted: Sequence[Message],
) -> str:
    max_tokens = config.max_summary_tokens
    words = max(40, int(max_tokens * 0.7))
    system = SUMMARIZER.format(words=words)
    # Room for the new messages: the window less the answer, instructions and old summary.
    prompt_room = int((config.context_window - max_tokens) / counter.ratio)
    room = max(prompt_room - counter.count(system) - max_tokens - 64, 200)
    previous = truncate_to_tokens(previous, max_tokens) if previous else previous
    summary = previous
    for chunk in _chunks([transcript_line(m) for m in evicted], counter, room):
        prompt = [
            {"role": "system", "content": system},
            {
                "role": "user",
                "content": f"Previous summary:\n{summary or '(none yet)'}\n\n"
                "New messages:\n" + "\n".join(chunk),
            },
        ]
        try:
            answer = clean_text((await model.complete(prompt, max_tokens=max_tokens)).content or "")
        except ModelError as error:
            log.warning("summary call failed, keeping a plain note instead: %s", error)
            answer = ""
        if answer.strip():
            summary = truncate_to_tokens(answer.strip(), max_tokens)
        else:
            summary = _fallback(summary, evicted, counter, max_tokens)
            break
    return summary or _fallback(previous, evicted, counter, max_tokens)


def _fallback(
    previous: str | None, evicted: Sequence[Message], counter: TokenCounter, max_tokens: int
) -> str:
    first, last = evicted[0].created_at, evicted[-1].created_at
    note = (
        f"({len(evicted)} messages from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} left "
        "view without a summary; search recall storage for them.)"
    )
    kept = truncate_to_tokens(previous or "", max(max_tokens - counter.count(note) - 2, 0))
    return f"{kept}\n{note}".strip()
