"""A model call costs the client the same whatever the prompt holds, and sends the same bytes.

`OpenAIChat` hands the `openai` client the messages and function schemas as `extra_body`,
so the client's type-driven transform no longer walks them on every call; these tests show
the request on the wire is byte for byte what `chat.completions.create(messages=...,
tools=...)` sends, and that the client's work before sending no longer grows with the
conversation. Also: the prompt cache key, and servers that refuse it.
"""

from __future__ import annotations

import json

import openai
import pytest
from openai._utils import _transform

from core.llm import OpenAIChat
from core.memory.executor import SCHEMAS
from core.wire.refusals import Adapt
from core.wire.shape import conform
from tests.fake_openai import say

# A prompt as the engine sends it (already in the wire's shape, which `conform` keeps).
PROMPT = [
    {"role": "system", "content": "You are a companion.\n<persona>warm</persona>"},
    {
        "role": "user",
        "content": "[system alert] Summary of the 3 earlier messages: hi\n\n"
        'Ünïcødé, emoji 🦜, quotes " and \\ and\nnew lines',
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "A1b2C3d4E",
                "type": "function",
                "function": {
                    "name": "send_message",
                    "arguments": json.dumps({"message": "Hi 🦜"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "A1b2C3d4E", "content": "Sent."},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "hello\n\n[system alert] Status: 100 of 8192 tokens in use (1%)."},
]


@pytest.fixture
async def client(fake):
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as c:
        yield c


@pytest.mark.parametrize(
    "tools, max_tokens, cache_key",
    [(SCHEMAS, 512, "companion-agent-7"), (SCHEMAS, None, None), (None, 300, None)],
)
async def test_the_bytes_on_the_wire_are_what_the_client_sent_before(
    fake, client, tools, max_tokens, cache_key
):
    fake.brain = lambda body: say("ok")
    before: dict = {"model": "gpt-x", "messages": PROMPT}
    if max_tokens:
        before["max_tokens"] = max_tokens
    if cache_key:
        before["prompt_cache_key"] = cache_key
    if tools:
        before["tool_choice"] = "auto"
        before["tools"] = tools
    await client.chat.completions.create(**before)  # the way the engine called it before
    await OpenAIChat(client, "gpt-x").complete(PROMPT, tools, max_tokens, cache_key)
    old, new = fake.raw_requests
    assert conform(PROMPT).messages == PROMPT
    assert new == old
    assert json.loads(new)["messages"] == PROMPT


def payload(turns: int) -> list[dict]:
    """A conversation of `turns` turns, each: a message, a call, its result, the yield."""
    prompt = [PROMPT[0]]
    for i in range(turns):
        call = {**PROMPT[2]["tool_calls"][0], "id": f"C{i:08d}"}
        prompt.append({"role": "user", "content": f"message {i}"})
        prompt.append({**PROMPT[2], "tool_calls": [call]})
        prompt.append({**PROMPT[3], "tool_call_id": call["id"]})
        prompt.append(PROMPT[4])
    return prompt[:-1]


async def test_the_client_does_not_walk_the_prompt(fake, client, monkeypatch):
    """Issue 15: the transform walked every message and schema, on every call."""
    fake.brain = lambda body: say("ok")
    steps = 0
    walk = _transform._async_transform_recursive

    async def counted(*args, **kwargs):
        nonlocal steps
        steps += 1
        return await walk(*args, **kwargs)

    monkeypatch.setattr(_transform, "_async_transform_recursive", counted)
    chat = OpenAIChat(client, "gpt-x")
    walked = []
    for size in (1, 300):
        steps = 0
        await chat.complete(payload(size), SCHEMAS, 512, "companion-agent-1")
        walked.append(steps)
    assert walked[0] == walked[1] < 50
    assert len(fake.requests[1]["messages"]) == 1 + 4 * 300 - 1  # and all of it was sent


async def test_cached_tokens_come_back_with_the_completion(fake, client):
    fake.brain = lambda body: say("ok")
    fake.prompt_cache = True
    chat = OpenAIChat(client, "gpt-x")
    first = await chat.complete(payload(200), SCHEMAS, 512, "companion-agent-1")
    second = await chat.complete(payload(201), SCHEMAS, 512, "companion-agent-1")
    assert first.cached_tokens == 0
    assert second.cached_tokens is not None and second.cached_tokens >= 1024
    assert second.cached_tokens % 128 == 0 and second.cached_tokens <= second.prompt_tokens


async def test_a_server_that_refuses_the_cache_key_is_asked_without_it(fake, client, caplog):
    fake.brain = lambda body: say("ok")
    fake.refused_params = {"prompt_cache_key"}
    chat = OpenAIChat(client, "gpt-x")
    for _ in range(3):
        answer = await chat.complete(PROMPT, SCHEMAS, 512, "companion-agent-1")
        assert answer.tool_calls[0].name == "send_message"
    sent = ["prompt_cache_key" in body for body in fake.requests]
    assert sent == [True, False, False, False], "refused once, then never sent again"
    assert "refuses the prompt_cache_key" in caplog.text


async def test_other_bad_requests_still_fail_and_keep_the_cache_key(fake, client):
    fake.fail_next(400, json.dumps({"error": {"message": "messages[2] is malformed"}}))
    chat = OpenAIChat(client, "gpt-x")
    with pytest.raises(Exception, match="malformed"):
        await chat.complete(PROMPT, SCHEMAS, 512, "companion-agent-1")
    assert Adapt.NO_CACHE_KEY not in chat.adapted
    assert len(fake.requests) == 1
