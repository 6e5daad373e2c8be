"""Garbage from the model endpoint: malformed bodies, wrong types, hostile function names and
arguments, fifty calls at once, endless chains and HTTP errors. The member always gets a
clear answer, what they said is kept, prompts fit the window, and the next turn is normal.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from core.events import EventKind, InboundEvent
from core.memory.turn import STEP_CAP_REPLY
from core.runtime.apologies import MODEL_SETUP_REPLY, WAITING_NOTICE
from tests.fake_openai import (
    calls,
    completion,
    default_brain,
    is_summary_request,
    last,
    raw_call,
    say,
    summary_of,
    tool_call,
)
from tests.hostile.common import (
    CONFIG,
    Bug,
    assert_clear,
    assert_prompts_fit,
    bug_marks,
    case,
    next_id,
    said,
    uid,
)
from tests.hostile.corpus import PROSE

# =============================================================================================
# Garbage from the model endpoint
# =============================================================================================


def raw_completion(message_: Any, **top: Any) -> dict[str, Any]:
    body = completion("x")
    body["choices"][0]["message"] = message_
    body.update(top)
    return body


def fn_call(name: Any = "send_message", arguments: Any = "{}", **extra: Any) -> dict:
    call = {"id": f"call_{next_id()}", "type": "function"}
    call["function"] = {"name": name, "arguments": arguments}
    call.update(extra)
    return call


def with_calls(*items: dict[str, Any]) -> dict[str, Any]:
    return raw_completion({"role": "assistant", "content": None, "tool_calls": list(items)})


STATUS_ECHO = "[system alert] Status: 1093 of 8192 tokens in use (13%)."


@dataclass(frozen=True)
class Garbage:
    first: Callable[[], Any]  # the answer to every request that does not follow a tool result
    tool_error: str | None = None  # what the first tool result must say
    recovered: bool = True  # after a tool result the model says "recovered"


def brain_for(spec: Garbage) -> Callable[[dict[str, Any]], Any]:
    def brain(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return summary_of(body)
        if spec.recovered and last(body).get("role") == "tool":
            return say("recovered")
        return spec.first()

    return brain


def searching(n: int, **args: Any) -> Callable[[], Any]:
    return lambda: calls(*[tool_call("conversation_search", **args) for _ in range(n)])


def nested(depth: int) -> str:
    return '{"message": ' + "[" * depth + "]" * depth + "}"


HUGE_THOUGHT = PROSE * 1300  # about 100 KB of private "thinking" each step

GARBAGE: dict[str, Garbage] = {
    # the body itself
    "body-not-json": Garbage(lambda: web.Response(text="I am not JSON", content_type="text/plain")),
    "body-empty": Garbage(lambda: web.Response(body=b"", content_type="application/json")),
    "body-null": Garbage(lambda: web.json_response(None)),
    "body-array": Garbage(lambda: web.json_response([1, 2, 3])),
    "body-number": Garbage(lambda: web.json_response(42)),
    "body-string": Garbage(lambda: web.json_response("hello")),
    "body-binary": Garbage(
        lambda: web.Response(body=bytes(range(256)), content_type="application/json")
    ),
    "body-nested-past-parsing": Garbage(
        lambda: web.Response(
            text='{"choices": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
            content_type="application/json",
        )
    ),
    "choices-string": Garbage(lambda: {"choices": "abc"}),
    "choices-numbers": Garbage(lambda: {"choices": [1, 2]}),
    "message-is-string": Garbage(lambda: raw_completion("hello there")),
    "message-is-list": Garbage(lambda: raw_completion(["hello"])),
    # wrong types inside the message
    "content-number": Garbage(lambda: raw_completion({"role": "assistant", "content": 42})),
    "content-list": Garbage(
        lambda: raw_completion(
            {"role": "assistant", "content": [{"type": "text", "text": "Hi there!"}]}
        )
    ),
    "content-object": Garbage(lambda: raw_completion({"role": "assistant", "content": {"a": 1}})),
    "content-nested-10k": Garbage(lambda: completion("[" * 10_000 + "]" * 10_000)),
    "content-tagged-nested-10k": Garbage(
        lambda: completion("<tool_call>" + "[" * 10_000 + "]" * 10_000 + "</tool_call>")
    ),
    "content-nul-and-surrogates": Garbage(lambda: completion("hi\x00 there \ud800 friend")),
    # small models copy the prompt's alerts into their answers (SmolLM2 on llama-server)
    "content-echoes-the-status": Garbage(
        lambda: completion(f"{STATUS_ECHO}\nOut of view: 0 older messages.\n\nfine, you?")
    ),
    "content-only-the-status": Garbage(lambda: completion(STATUS_ECHO), recovered=False),
    "send-only-the-status": Garbage(
        lambda: calls(tool_call("send_message", message=STATUS_ECHO)), "never sees system alerts"
    ),
    "tool-calls-dict": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": fn_call()})
    ),
    "tool-calls-string": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": "send_message"})
    ),
    "tool-call-without-function": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": [{"id": "a", "type": "x"}]})
    ),
    "tool-call-function-null": Garbage(
        lambda: raw_completion(
            {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": None}]}
        )
    ),
    "tool-name-number": Garbage(lambda: with_calls(fn_call(123, "{}"))),
    "tool-name-null": Garbage(lambda: with_calls(fn_call(None, "{}")), "unknown function"),
    "tool-arguments-object": Garbage(
        lambda: with_calls(fn_call("send_message", {"message": "hi"}))
    ),
    "tool-arguments-number": Garbage(lambda: with_calls(fn_call("send_message", 42))),
    "tool-arguments-null": Garbage(lambda: with_calls(fn_call("send_message", None)), "missing"),
    "tool-id-number": Garbage(
        lambda: with_calls(fn_call("archival_memory_search", '{"query": "x"}', id=7))
    ),
    "tool-id-missing": Garbage(
        lambda: with_calls(
            {
                "type": "function",
                "function": {"name": "conversation_search", "arguments": '{"query": "x"}'},
            }
        )
    ),
    "tool-id-empty": Garbage(
        lambda: with_calls(fn_call("conversation_search", '{"query": "x"}', id=""))
    ),
    "tool-ids-duplicate": Garbage(
        lambda: with_calls(
            fn_call("conversation_search", '{"query": "a"}', id="same"),
            fn_call("conversation_search", '{"query": "b"}', id="same"),
        )
    ),
    "tool-id-nul": Garbage(
        lambda: with_calls(fn_call("conversation_search", '{"query": "x"}', id="call\x00one"))
    ),
    "tool-id-lone-surrogate": Garbage(
        lambda: with_calls(fn_call("conversation_search", '{"query": "x"}', id="call\ud800one"))
    ),
    "usage-past-64-bits": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": 10**30, "completion_tokens": 10**30}}
    ),
    "usage-strings": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": "many", "completion_tokens": "few"}}
    ),
    "usage-negative": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": -50, "completion_tokens": -1}}
    ),
    "usage-absurd": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": 10**15, "completion_tokens": 10**15}}
    ),
    "finish-reason-garbage": Garbage(
        lambda: {**say("fine"), "choices": [{**say("fine")["choices"][0], "finish_reason": "💥"}]}
    ),
    # function names
    "name-empty": Garbage(lambda: calls(raw_call("", "{}")), "unknown function"),
    "name-blank": Garbage(lambda: calls(raw_call("   ", "{}")), "unknown function"),
    "name-trailing-space": Garbage(
        lambda: calls(raw_call("send_message ", '{"message": "x"}')), "unknown function"
    ),
    "name-upper-case": Garbage(
        lambda: calls(raw_call("SEND_MESSAGE", '{"message": "x"}')), "unknown function"
    ),
    "name-with-nul": Garbage(
        lambda: calls(raw_call("send_message\x00", '{"message": "x"}')), "unknown function"
    ),
    "name-homoglyph": Garbage(
        lambda: calls(raw_call("ѕend_message", '{"message": "x"}')), "unknown function"
    ),
    "name-traversal": Garbage(
        lambda: calls(raw_call("../../etc/passwd", "{}")), "unknown function"
    ),
    "name-dunder": Garbage(lambda: calls(raw_call("__class__", "{}")), "unknown function"),
    "name-engine-internal": Garbage(lambda: calls(raw_call("execute", "{}")), "unknown function"),
    "name-shell": Garbage(
        lambda: calls(raw_call("send_message\nrm -rf /", "{}")), "unknown function"
    ),
    "name-100kb": Garbage(lambda: calls(raw_call("n" * 100_000, "{}")), "unknown function"),
    # arguments
    "args-100kb-garbage": Garbage(
        lambda: calls(raw_call("send_message", "}" + '{["' * 33_000)), "not valid JSON"
    ),
    "args-nested-10k": Garbage(lambda: calls(raw_call("send_message", nested(10_000))), "Error"),
    "args-nested-100": Garbage(
        lambda: calls(raw_call("send_message", nested(100))), "must be a string"
    ),
    "args-key-nul": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "hi", "\\u0000": 1}')),
        "unknown argument",
    ),
    "args-key-lone-surrogate": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "hi", "\\ud800": 1}')),
        "unknown argument",
    ),
    "args-number-past-python": Garbage(
        lambda: calls(raw_call("conversation_search", '{"query": ' + "9" * 5000 + "}")),
        "not valid JSON",
    ),
    "args-nul-escape": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "hi\\u0000there"}'))
    ),
    "args-page-as-string": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page="2"))
    ),
    "args-page-as-word": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page="two")), "must be an integer"
    ),
    "args-page-huge": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page=10**30)), "Error"
    ),
    "args-page-infinite": Garbage(
        lambda: calls(raw_call("conversation_search", '{"query": "x", "page": 1e400}')),
        "must be an integer",
    ),
    "args-page-negative": Garbage(
        lambda: calls(tool_call("archival_memory_search", query="x", page=-3)),
        "page must be 1 or more",
    ),
    "args-heartbeat-yes": Garbage(
        lambda: calls(
            tool_call("core_memory_append", label="human", content="x", request_heartbeat="yes")
        ),
        "must be a boolean",
    ),
    "args-array": Garbage(lambda: calls(raw_call("send_message", "[1, 2]")), "JSON object"),
    "args-null": Garbage(lambda: calls(raw_call("send_message", "null")), "JSON object"),
    "args-string": Garbage(lambda: calls(raw_call("send_message", '"hello"')), "JSON object"),
    "args-empty": Garbage(lambda: calls(raw_call("send_message", "")), "missing required"),
    "args-trailing-data": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "a"}}')), "not valid JSON"
    ),
    "args-unknown-key": Garbage(
        lambda: calls(tool_call("send_message", message="a", to="bob")), "unknown argument"
    ),
    "args-other-block": Garbage(
        lambda: calls(tool_call("core_memory_append", label="../bob", content="x")),
        "there is no block",
    ),
    "args-block-overflow": Garbage(
        lambda: calls(tool_call("core_memory_append", label="human", content="x" * 100_000)),
        "over its limit",
    ),
    "args-dates-extreme": Garbage(
        lambda: calls(
            tool_call("conversation_search_date", start_date="0001-01-01", end_date="9999-12-31")
        )
    ),
    "args-dates-garbage": Garbage(
        lambda: calls(
            tool_call("conversation_search_date", start_date="yesterday", end_date="2026-02-30")
        ),
        "YYYY-MM-DD",
    ),
    "args-archival-100kb": Garbage(
        lambda: calls(tool_call("archival_memory_insert", content=PROSE * 1300))
    ),
    "args-search-operators": Garbage(
        lambda: calls(tool_call("conversation_search", query="!!! & | :* ( ) <-> '\\"))
    ),
    # fifty calls in one answer
    "50-unknown-functions": Garbage(
        lambda: calls(*[raw_call(f"nope_{i}", "{}") for i in range(50)]), "unknown function"
    ),
    "50-searches": Garbage(searching(50, query="harbour")),
    "50-sends": Garbage(
        lambda: calls(*[tool_call("send_message", message=f"part {i}") for i in range(50)])
    ),
    "50-appends": Garbage(
        lambda: calls(
            *[
                tool_call("core_memory_append", label="human", content="fact " * 60)
                for _ in range(50)
            ]
        )
    ),
    "50-archival-inserts": Garbage(
        lambda: calls(*[tool_call("archival_memory_insert", content=PROSE * 25) for _ in range(50)])
    ),
    "50-mixed-garbage": Garbage(
        lambda: calls(
            *[
                raw_call(n, a)
                for n, a in [
                    ("send_message", "{"),
                    ("", "{}"),
                    ("conversation_search", "[]"),
                    ("x" * 500, "null"),
                ]
                * 13
            ][:50]
        ),
        "Error",
    ),
    # endless chains: the step cap ends them
    "loop-search": Garbage(searching(1, query="anything"), recovered=False),
    "loop-append-with-heartbeat": Garbage(
        lambda: calls(
            tool_call(
                "core_memory_append", label="persona", content="I loop.", request_heartbeat=True
            )
        ),
        recovered=False,
    ),
    "loop-unknown-function": Garbage(lambda: calls(raw_call("think_more", "{}")), recovered=False),
    "loop-empty-answers": Garbage(lambda: completion(None), recovered=False),
    "loop-bad-json": Garbage(lambda: calls(raw_call("send_message", "{{{")), recovered=False),
    "send-with-heartbeat-ends-the-turn": Garbage(
        lambda: calls(tool_call("send_message", message="again?", request_heartbeat=True)),
    ),
    "loop-huge-thoughts": Garbage(
        lambda: calls(raw_call("think_more", "{}"), thought=HUGE_THOUGHT), recovered=False
    ),
    "loop-archival-search": Garbage(
        lambda: calls(tool_call("archival_memory_search", query="x", request_heartbeat=True)),
        recovered=False,
    ),
}
GARBAGE_BUGS: dict[str, Bug] = {}


def garbage_cases() -> list[Any]:
    return [case(name, *bug_marks(GARBAGE_BUGS, name), id=name) for name in GARBAGE]


@pytest.mark.parametrize("name", garbage_cases())
async def test_model_garbage(engines, module_fake, module_sessions, name):
    spec = GARBAGE[name]
    engine = engines()  # a fresh token counter: garbage usage must not skew other cases
    module_fake.brain = brain_for(spec)
    scope = await engine.agent("garbage", uid())
    words = f"hello, this is case {name}"

    exchange = await asyncio.wait_for(
        engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words)), 60
    )

    assert exchange.replies, "the member got no answer"
    for reply in exchange.replies:
        assert_clear(reply)
    assert await said(module_sessions, scope) == [words]
    assert len(module_fake.chat_requests) <= CONFIG.max_steps
    assert_prompts_fit(module_fake)
    if spec.tool_error is not None:
        result = next(m for m in module_fake.chat_requests[1]["messages"] if m["role"] == "tool")
        assert result["content"].startswith("Error"), result["content"][:200]
        assert spec.tool_error in result["content"], result["content"][:300]
        assert len(result["content"]) <= CONFIG.max_tool_output_chars + 100
    if not spec.recovered:
        assert len(module_fake.chat_requests) == CONFIG.max_steps
        assert STEP_CAP_REPLY in exchange.replies

    module_fake.brain = default_brain  # and the member's next message is handled normally
    module_fake.requests.clear()
    again = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "are you back?"))
    # After a failed turn the unanswered words lead the new message (one user message).
    (reply,) = again.replies
    assert reply.startswith("You said: ") and reply.endswith("are you back?")
    assert_prompts_fit(module_fake)


async def test_a_lone_surrogate_in_an_argument_is_cleaned_not_refused(
    engines, module_fake, module_sessions
):
    """JSON may escape a lone surrogate ("\\ud800"): the text is stored with U+FFFD for it,
    as a member's own words are, not refused as "not a string"."""
    engine = engines()
    arguments = '{"content": "the code is 4\\ud800 2\\u0000"}'
    module_fake.brain = brain_for(
        Garbage(lambda: calls(raw_call("archival_memory_insert", arguments)))
    )
    scope = await engine.agent("garbage", uid())

    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "keep it"))

    assert exchange.replies == ["recovered"]
    result = next(m for m in module_fake.chat_requests[1]["messages"] if m["role"] == "tool")
    assert result["content"].startswith("Stored in archival memory."), result["content"][:200]


async def test_a_call_written_as_text_is_read_in_linear_time(engines, module_fake, module_sessions):
    """Reading calls a model wrote as text runs on the event loop: an opening tag and a few
    thousand blank lines (a small model looping on newlines) took a minute, during which no
    member anywhere was answered."""
    engine = engines()
    module_fake.brain = brain_for(Garbage(lambda: completion("<tool_call>" + "\n" * 5_000 + ".")))
    scope = await engine.agent("garbage", uid())

    started = time.monotonic()
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello"))

    assert time.monotonic() - started < 5
    (reply,) = exchange.replies
    assert_clear(reply)


@pytest.mark.parametrize(
    "spec",
    [
        case((400, "garbage {"), id="http-400-garbage"),
        case((401, ""), id="http-401"),
        case((404, "<html>not here</html>"), id="http-404-html"),
        case((413, "too large"), id="http-413"),
        case((422, json.dumps({"error": {"message": "x" * 5000}})), id="http-422-huge-error"),
        case((503, "\x00\x01\x02"), id="http-503-binary"),
    ],
)
async def test_model_http_errors(engines, module_fake, module_sessions, spec):
    code, text_ = spec
    engine = engines()
    module_fake.fail_next(code, text_ or "")
    scope = await engine.agent("garbage", uid())
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello?"))
    (reply,) = exchange.replies
    assert_clear(reply)
    # Kind, and without the server's words: a 4xx will repeat (the setup); a 5xx means the
    # endpoint is down, and the message waits for it.
    assert reply == (WAITING_NOTICE if code >= 500 else MODEL_SETUP_REPLY)
    assert str(code) not in reply and "garbage" not in reply and "html" not in reply
    assert await said(module_sessions, scope) == ["hello?"]
