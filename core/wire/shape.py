"""The shape of every chat request: one form that the strictest servers accept.

`conform(messages)` takes the chat messages of a prompt, built from whatever the
database holds, and returns the same conversation in the one form that OpenAI, vLLM,
Ollama and llama.cpp with the mainstream chat templates (Llama 3, Mistral, Gemma, Qwen,
Hermes) all take:

    system?  user  (assistant | assistant-with-one-call  tool | user)*

- at most one system message, first; any later one becomes a user-role alert
- the conversation starts with a user message
- plain user and plain assistant messages alternate, counting only the plain ones
  (Mistral's templates): consecutive user messages are merged into one; a user message
  right after function results gets an empty assistant message before it (the agent
  yielded there)
- one call per assistant message (Llama 3's templates), answered at once by its tool
  message; a call nobody answered gets a result saying so, a result that answers no call
  becomes an alert in the conversation
- call ids of nine letters and digits (Mistral's templates), made from the stored id, so
  the same history always gives the same ids and the provider's prompt cache holds;
  function names as OpenAI allows them, arguments a JSON object as llama.cpp and vLLM read
  them
- no null or empty content where a server wants text

`carry(messages, tail)` then puts what changes with every call (the status alert) inside
the last message, the person's words or a function's result: never a second user message
in a row.

Everything here is deterministic and works from the front, so a prompt that extends the
previous one conforms to a form that extends the previous form except near its end.
`Conformed.repairs` counts what only a damaged history needs (the metrics report it);
`added` bounds the tokens conforming added, so counts made before it stay upper bounds.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ALERT = "[system alert]"
NO_RESULT = f"{ALERT} This call was interrupted before it returned a result."
ORPHAN_RESULT = f"{ALERT} A function result whose call is no longer in view:"
OPENING = f"{ALERT} The conversation so far is summarised above or kept in recall storage."
CONTINUED = f"{ALERT} The chain of functions went on."
EMPTY = "(empty)"
# A call whose arguments are not a JSON object (the model's mistake, its result says so):
# llama.cpp and vLLM parse every call in the history, and refuse the whole request.
UNREADABLE_ARGUMENTS = '{"unreadable": "the arguments were not a JSON object"}'
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 9
FRAMING = 4  # tokens a message's role and separators cost, as core.memory.tokens counts


@dataclass
class Conformed:
    """The request's messages, what was repaired (by kind) and the tokens added at most."""

    messages: list[dict[str, Any]]
    repairs: Counter[str] = field(default_factory=Counter)
    added: int = 0


def conform(messages: list[dict[str, Any]]) -> Conformed:
    """`messages` in the strict form. Conforming a conformed prompt changes nothing."""
    out = Conformed([])
    system, rest = _split_system(messages, out)
    out.messages = system + _alternate(_pair_calls(rest, out), out)
    return out


def carry(messages: list[dict[str, Any]], tail: str) -> list[dict[str, Any]]:
    """A conformed prompt with `tail` inside its last message when the person or a function
    spoke last (else, after an answer of the agent, as a message of its own)."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] in ("user", "tool"):
        return [*messages[:-1], _merged(last, {"role": last["role"], "content": tail})]
    return [*messages, {"role": "user", "content": tail}]


def _split_system(
    messages: list[dict[str, Any]], out: Conformed
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The leading system message (if any), and the rest with later ones made alerts."""
    system: list[dict[str, Any]] = []
    rest = list(messages)
    if rest and rest[0].get("role") in ("system", "developer"):
        content = _text(rest.pop(0).get("content"))
        if content:
            system = [{"role": "system", "content": content}]
    for i, message in enumerate(rest):
        if message.get("role") in ("system", "developer"):
            out.repairs["late_system"] += 1
            rest[i] = {"role": "user", "content": f"{ALERT} {_text(message.get('content'))}"}
            out.added += _at_most(ALERT) + 1
    return system, rest


def _pair_calls(messages: list[dict[str, Any]], out: Conformed) -> list[dict[str, Any]]:
    """Each call in an assistant message of its own, followed at once by its result."""
    result: list[dict[str, Any]] = []
    seen_ids: Counter[str] = Counter()
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        if role == "tool":
            result.append(_orphan(message, out))
            i += 1
            continue
        if role != "assistant" or not message.get("tool_calls"):
            result.append(_plain(message, out))
            i += 1
            continue
        calls = [c for c in message["tool_calls"] if isinstance(c, dict)]
        wanted = Counter(str(c.get("id")) for c in calls)
        answers: dict[str, list[dict[str, Any]]] = {}
        orphans: list[dict[str, Any]] = []
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            answer_id = str(messages[j].get("tool_call_id"))
            if len(answers.setdefault(answer_id, [])) < wanted[answer_id]:
                answers[answer_id].append(messages[j])
            else:
                orphans.append(messages[j])
            j += 1
        if calls:
            result.extend(_one_call_each(message, calls, answers, seen_ids, out))
        else:
            out.repairs["bad_calls"] += 1
            result.append(_plain({**message, "tool_calls": None}, out))
        result.extend(_orphan(extra, out) for extra in orphans)
        i = j
    return result


def _orphan(message: dict[str, Any], out: Conformed) -> dict[str, Any]:
    """A function result that answers no call in view, as an alert the agent can read."""
    out.repairs["orphan_result"] += 1
    out.added += _at_most(ORPHAN_RESULT) + 1
    return {"role": "user", "content": f"{ORPHAN_RESULT} {_text(message.get('content')) or EMPTY}"}


def _one_call_each(
    message: dict[str, Any],
    calls: list[dict[str, Any]],
    answers: dict[str, list[dict[str, Any]]],
    seen_ids: Counter[str],
    out: Conformed,
) -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = []
    content = _text(message.get("content"))
    if len(calls) > 1:
        out.added += (len(calls) - 1) * 2 * FRAMING
    for n, call in enumerate(calls):
        stored_id = str(call.get("id") or "")
        seen_ids[stored_id] += 1
        wire_id = call_id(stored_id, seen_ids[stored_id] - 1)
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        if not NAME.fullmatch(name):
            out.repairs["bad_name"] += 1
            name = function_name(name)
        arguments = function.get("arguments")
        if not _json_object(arguments):
            out.repairs["bad_arguments"] += 1
            arguments = UNREADABLE_ARGUMENTS
            out.added += _at_most(UNREADABLE_ARGUMENTS)
        shown_call = {
            "id": wire_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        pairs.append(
            {"role": "assistant", "content": content if n == 0 else "", "tool_calls": [shown_call]}
        )
        answer = answers[stored_id].pop(0) if answers.get(stored_id) else None
        if answer is None:
            out.repairs["unanswered_call"] += 1
            out.added += _at_most(NO_RESULT) + FRAMING
            result_text = NO_RESULT
        else:
            result_text = _text(answer.get("content")) or EMPTY
        pairs.append({"role": "tool", "tool_call_id": wire_id, "content": result_text})
    return pairs


def _json_object(arguments: Any) -> bool:
    """Arguments as llama.cpp and vLLM read a call in the history: text of a JSON object."""
    if not isinstance(arguments, str):
        return False
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):
        return False


def _plain(message: dict[str, Any], out: Conformed) -> dict[str, Any]:
    """A user or plain assistant message with text content (or a user's list of parts)."""
    role = message.get("role")
    content = message.get("content")
    if role == "user" and isinstance(content, list) and content:
        return {"role": "user", "content": content}
    if role not in ("user", "assistant"):
        out.repairs["unknown_role"] += 1
        return {"role": "user", "content": f"{ALERT} {_text(content)}"}
    text = _text(content)
    if role == "user" and not text:
        out.repairs["empty_content"] += 1
        text = EMPTY
    return {"role": role, "content": text}


def _alternate(messages: list[dict[str, Any]], out: Conformed) -> list[dict[str, Any]]:
    """Plain user and assistant messages alternating, starting with a user message."""
    body: list[dict[str, Any]] = []
    plain_last: str | None = None  # the role of the last plain (no call, not tool) message
    for message in messages:
        role, calls = message["role"], message.get("tool_calls")
        if plain_last is None and role != "user":
            out.repairs["opening"] += 1
            body.append({"role": "user", "content": OPENING})
            out.added += _at_most(OPENING) + FRAMING
            plain_last = "user"
        if role == "tool" or calls:
            body.append(message)
            continue
        if role == plain_last:
            if body[-1]["role"] == role and not body[-1].get("tool_calls"):
                body[-1] = _merged(body[-1], message)
                continue
            # Only calls and results between two messages of one role: the other role
            # yielded there. Before the person's message, the agent answered nothing more;
            # before the agent's, the chain simply went on.
            if role == "user":
                body.append({"role": "assistant", "content": ""})
                out.added += FRAMING + 1
            else:
                body.append({"role": "user", "content": CONTINUED})
                out.added += _at_most(CONTINUED) + FRAMING
        body.append(message)
        plain_last = role
    return body


def without_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conformed prompt for a template that renders no functions and counts every
    message in its alternation (Gemma 2's): each call becomes the agent's words, each result
    the next user message, so user and assistant still alternate one by one."""
    flat = []
    for message in messages:
        if message.get("tool_calls"):
            (call,) = message["tool_calls"]
            function = call["function"]
            said = f"[called {function['name']}({function['arguments']})]"
            flat.append({"role": "assistant", "content": _joined(message.get("content"), said)})
        elif message["role"] == "tool":
            flat.append({"role": "user", "content": f"[function result] {message['content']}"})
        else:
            flat.append(message)
    return flat


def _joined(first: Any, second: str) -> str:
    text = _text(first)
    return f"{text}\n{second}" if text else second


def without_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conformed prompt for a server with no system role (Gemma's templates): the
    instructions lead the first user message, as those templates expect."""
    if len(messages) < 2 or messages[0]["role"] != "system":
        return messages
    first = _merged({"role": "user", "content": messages[0]["content"]}, messages[1])
    return [first, *messages[2:]]


def _merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two messages of one role as one; text joined by a blank line, parts concatenated."""
    a, b = first.get("content"), second.get("content")
    merged = dict(first)
    if isinstance(a, list) or isinstance(b, list):
        merged["content"] = _parts(a) + _parts(b)
    else:
        merged["content"] = "\n\n".join(t for t in (_text(a), _text(b)) if t)
    return merged


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    text = _text(content)
    return [{"type": "text", "text": text}] if text else []


def _text(content: Any) -> str:
    """Content as text: None is empty, a list of parts keeps its text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return str(content)


def _at_most(text: str) -> int:
    """An upper bound of the tokens of `text`: every token is at least one byte."""
    return len(text.encode())


def call_id(stored: str, occurrence: int = 0) -> str:
    """Nine letters and digits for a stored call id (its `occurrence`-th use in a prompt)."""
    if occurrence == 0 and len(stored) == ID_LENGTH and stored.isascii() and stored.isalnum():
        return stored
    digest = hashlib.blake2b(f"{stored}#{occurrence}".encode(), digest_size=8).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(ID_LENGTH):
        number, digit = divmod(number, len(ID_ALPHABET))
        chars.append(ID_ALPHABET[digit])
    return "".join(chars)


def function_name(name: str) -> str:
    """A name as OpenAI allows it: letters, digits, _ and -, 1 to 64 of them."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_")[:64]
    return cleaned or "unnamed_function"
