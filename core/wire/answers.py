"""Reading a model's answer the same way whichever server sent it.

    read_content(content)          its text, with the model's private reasoning taken out
    calls_in_text(text, names)     function calls a model wrote as text, when unambiguous

Reasoning models put their thinking in the content (`<think>...</think>`, also
`<thinking>` and `<reasoning>`) or in a field of its own (`reasoning_content`,
`reasoning`): neither ever reaches a member nor is stored as something the agent said.

Models without a tool-call format of their own (or servers that did not parse it) write a
call as text. It is taken as the call only where nothing else could be meant:

- `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen): one call per
  tag; the text around the tags is the model's thinking
- the whole answer one JSON object `{"name": ..., "arguments": {...}}` (also `parameters`),
  or such an object alone in one fenced code block

and only when the name is one of the agent's functions.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection
from typing import Any

from core.ports import ToolCall

THINKING = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)
# A reasoning model's answer whose opening tag the server left in its template: the text
# up to the first closing tag is thinking.
UNOPENED = re.compile(
    r"\A(?:(?!<(?:think|thinking|reasoning)>).)*?</(think|thinking|reasoning)>",
    re.DOTALL | re.IGNORECASE,
)
# A tag's body runs to the next tag, so the search is linear whatever the text: `\s*(.*?)\s*`
# took minutes over "<tool_call>" and a few thousand blank lines, blocking every member.
TAGGED_CALL = re.compile(r"<tool_call>((?:(?!</?tool_call>).)*)</tool_call>", re.DOTALL)
FENCED = re.compile(r"\A```[a-zA-Z]*\s*\n?(.*?)\n?```\Z", re.DOTALL)


def read_content(content: str | None) -> str | None:
    """`content` without the reasoning a model wrote into it; None if nothing else is left."""
    if not content:
        return content
    text = UNOPENED.sub("", content, count=1)
    text = THINKING.sub("", text).strip()
    return text or None


def calls_in_text(text: str | None, names: Collection[str]) -> tuple[str | None, list[ToolCall]]:
    """(what is left of `text`, the calls written in it) when the calls are unambiguous;
    else (`text`, [])."""
    if not text:
        return text, []
    tagged = TAGGED_CALL.findall(text)
    if tagged:
        calls = [_call(body, names) for body in tagged]
        if all(calls):
            rest = TAGGED_CALL.sub("", text).strip()
            return rest or None, [c for c in calls if c]
        return text, []
    stripped = text.strip()
    fenced = FENCED.match(stripped)
    call = _call(fenced.group(1) if fenced else stripped, names)
    return (None, [call]) if call else (text, [])


def _call(body: str, names: Collection[str]) -> ToolCall | None:
    """One call from a JSON object naming a known function, else None."""
    try:
        parsed: Any = json.loads(body)
    except (ValueError, RecursionError):  # "[[[[…" ten thousand deep is text, not a call
        return None
    if not isinstance(parsed, dict):
        return None
    name = parsed.get("name")
    arguments = parsed.get("arguments", parsed.get("parameters", {}))
    if not isinstance(name, str) or name not in names or not isinstance(arguments, dict | str):
        return None
    if set(parsed) - {"name", "arguments", "parameters", "id", "type"}:
        return None
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=text)
