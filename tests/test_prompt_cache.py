"""A cache-friendly main context: between flushes and block edits, each prompt is the previous
one plus what happened since, so a provider's prompt cache serves nearly all of it. The
status (tokens in use, the time, what is out of view) comes last; the model still sees it.
One cache key per agent goes with every call."""

from __future__ import annotations

import random

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from tests.fake_openai import (
    STATUS_ALERT,
    calls,
    common_prefix,
    count_prompt,
    is_summary_request,
    last_user_text,
    prompt_tokens,
    say,
    strip_status,
    summary_of,
    tool_call,
)

WORDS = "river lantern maple quartz velvet harbor ember saffron tundra orbit meadow".split()


def brain(body):
    """Answers; `remember ...` edits working context (a block edit) before answering."""
    if is_summary_request(body):
        return summary_of(body)
    if body["messages"][-1]["role"] == "tool":  # a function ran: now answer
        return say("Noted.")
    text = last_user_text(body)
    if text.startswith("remember "):
        return calls(tool_call("core_memory_append", label="human", content=text[9:]))
    return say(f"You said: {text[:40]}")


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


def line(rng: random.Random, words: int = 40) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def talk(engine, scope, clock, texts) -> None:
    for text in texts:
        clock.advance(minutes=7)
        await engine.converse(scope, msg(text))


def between_flushes(requests):
    """Pairs of consecutive chat calls with no summary call and no block edit between."""
    pairs, previous = [], None
    for body in requests:
        if is_summary_request(body):
            previous = None
            continue
        if previous is not None and previous["messages"][0] == body["messages"][0]:
            pairs.append((previous, body))
        previous = body
    return pairs


async def test_each_prompt_starts_with_the_whole_previous_one_but_its_status(
    make_engine_for, fake, clock
):
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=4096, rate_limit=None))
    scope = await engine.agent("t", "u")
    rng = random.Random(3)
    texts = [line(rng) for _ in range(30)]
    texts[5], texts[17] = "remember I keep bees", "remember my bees are called Ada"
    await talk(engine, scope, clock, texts)

    chats = fake.chat_requests
    assert any(is_summary_request(b) for b in fake.requests), "the queue was flushed"
    pairs = between_flushes(fake.requests)
    assert len(pairs) >= len(chats) - 8
    for previous, body in pairs:
        kept = previous["messages"][:-1]
        assert body["messages"][: len(kept)] == kept  # only the last message changed:
        before, after = previous["messages"][-1], body["messages"][len(kept)]
        assert STATUS_ALERT in before["content"] and STATUS_ALERT in body["messages"][-1]["content"]
        assert after["content"].startswith(strip_status(before["content"]))  # its status left
    edits = [b for b in chats if "bees" in b["messages"][0]["content"]]
    assert edits, "a block edit shows in the system message"


async def test_the_model_still_sees_its_budget_and_the_time(make_engine_for, fake, clock):
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=8192))
    scope = await engine.agent("t", "u")
    await talk(engine, scope, clock, ["hello there"])
    last = fake.chat_requests[0]["messages"][-1]["content"]
    assert last.startswith("hello there\n\n[system alert] Status: ")  # inside the last message
    status = last.split("\n\n", 1)[1]

    used = int(status.split("Status: ", 1)[1].split(" ", 1)[0])
    assert abs(used - count_prompt(fake.chat_requests[0])) < 60
    assert "of 8192 tokens in use" in status and "Now: Sunday 2026-03-01 12:07 (UTC)" in status
    assert "Status:" not in fake.chat_requests[0]["messages"][0]["content"]


async def test_nearly_all_of_each_prompt_is_a_cacheable_prefix(make_engine_for, fake, clock):
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=8192, rate_limit=None))
    scope = await engine.agent("t", "u")
    rng = random.Random(4)
    await talk(engine, scope, clock, [line(rng, 25) for _ in range(70)])
    shares = []
    for previous, body in between_flushes(fake.requests):
        tokens = prompt_tokens(body)
        shares.append(common_prefix(prompt_tokens(previous), tokens) / len(tokens))
    shares.sort()
    assert shares[len(shares) // 2] >= 0.95  # the median; it was 0.09 with the status first


async def test_one_cache_key_per_agent(make_engine_for, fake, clock):
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=8192))
    ann, bob = await engine.agent("t", "ann"), await engine.agent("t", "bob")
    for scope in (ann, bob, ann, bob):
        await talk(engine, scope, clock, ["hi"])
    keys = [body["prompt_cache_key"] for body in fake.chat_requests]
    assert keys[0] == keys[2] != keys[1] == keys[3]
    assert keys[0] == f"companion-agent-{ann.agent_id}"


async def test_a_server_refusing_the_cache_key_still_answers(make_engine_for, fake, clock):
    fake.brain = brain
    fake.refused_params = {"prompt_cache_key"}
    engine = make_engine_for(EngineConfig(context_window=8192))
    scope = await engine.agent("t", "u")
    for text in ("hello", "still there?"):
        clock.advance(minutes=5)
        exchange = await engine.converse(scope, msg(text))
        assert exchange.replies == [f"You said: {text}"]
    assert ["prompt_cache_key" in b for b in fake.requests] == [True, False, False]
