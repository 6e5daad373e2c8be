"""The main context kept between turns: the FIFO queue is read once per process, each message
rendered and counted once, and the copy is never used after anything else changed the queue
(another process, a message kept without a turn, a failed turn, an import, a reset). What
the model receives is exactly what a fresh read of the database would give."""

from __future__ import annotations

import json
import random

from sqlalchemy import event, select, update

from core.config import EngineConfig
from core.errors import ModelError
from core.events import EventKind, InboundEvent
from core.members.portability import parse_export
from core.members.service import Members
from core.memory.contexts import ContextCache
from core.memory.prompt import count_basis, message_tokens
from core.models import Agent, Message
from tests.fake_openai import (
    calls,
    is_summary_request,
    last,
    last_user_text,
    person_said,
    say,
    summary_of,
    tool_call,
)

WORDS = "river lantern maple quartz velvet harbor ember saffron tundra orbit meadow".split()


def brain(body):
    if is_summary_request(body):
        return summary_of(body)
    newest = last(body)
    if newest["role"] == "tool":
        return say("Noted: " + newest["content"][:40])
    text = last_user_text(body)
    if text.startswith("remember "):
        return calls(tool_call("core_memory_append", label="human", content=text[9:]))
    if text.startswith("search "):
        return calls(tool_call("conversation_search", query=text[7:]))
    return say(f"You said: {text[:40]}")


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


class Forgetful(ContextCache):
    """A cache that never has anything: every turn reads the queue from the database."""

    def get(self, agent_id, version, basis):
        return None


def without_call_ids(requests: list[dict]) -> list[dict]:
    """The bodies with the random tool-call ids (the fake's, as the wire shows them)
    numbered in order of appearance."""
    numbers: dict[str, str] = {}

    def number(found: str) -> str:
        return numbers.setdefault(found, f"call-{len(numbers)}")

    bodies = json.loads(json.dumps(requests))
    for body in bodies:
        for message in body["messages"]:
            if message.get("tool_call_id"):
                message["tool_call_id"] = number(message["tool_call_id"])
            for call in message.get("tool_calls") or ():
                call["id"] = number(call["id"])
    return bodies


def texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))
        out.append(
            "remember " + words[:60] if i % 9 == 4 else "search lantern" if i % 11 == 7 else words
        )
    return out


async def test_the_model_receives_what_a_fresh_read_would_give(make_engine_for, fake, clock):
    """Flushes, warnings, block edits and searches, with and without the kept copy."""
    fake.brain = brain
    config = EngineConfig(context_window=4096, rate_limit=None)
    prompts, start = [], clock.now
    for contexts in (ContextCache(), Forgetful()):
        fake.requests.clear()
        clock.now = start
        engine = make_engine_for(config)
        engine.mind.contexts = contexts
        scope = await engine.agent("t", f"u-{type(contexts).__name__}")
        for text in texts(7, 45):
            clock.advance(minutes=4)
            await engine.converse(scope, msg(text))
        prompts.append([(b["messages"], b.get("tools")) for b in without_call_ids(fake.requests)])
    kept, fresh = prompts
    assert any(not tools for _, tools in kept), "the queue was flushed"
    assert len(kept) == len(fresh) and kept == fresh


def messages_read(engine) -> list[str]:
    """The statements that read an agent's FIFO queue from the database."""
    seen: list[str] = []

    def look(conn, cursor, statement, *args):
        if "FROM messages" in statement and "in_context" in statement:
            if statement.lstrip().upper().startswith("SELECT"):
                seen.append(statement)

    event.listen(engine.sessions.kw["bind"].sync_engine, "before_cursor_execute", look)
    return seen


async def test_the_queue_is_read_once_per_process(make_engine_for, fake, clock):
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=128_000, rate_limit=None))
    reads = messages_read(engine)
    scope = await engine.agent("t", "u")
    for text in texts(1, 12):
        clock.advance(minutes=4)
        await engine.converse(scope, msg(text))
    assert len(reads) == 1, "the first turn reads the queue; the others start from its copy"
    assert engine.mind.contexts.hits == 11


async def test_another_process_changes_the_queue_and_the_copy_is_not_used(
    make_engine_for, fake, clock
):
    fake.brain = brain
    config = EngineConfig(context_window=8192, rate_limit=None)
    one, two = make_engine_for(config), make_engine_for(config)  # two processes
    scope = await one.agent("t", "u")
    await one.converse(scope, msg("first, in process one"))
    clock.advance(minutes=1)
    await two.converse(scope, msg("second, in process two"))
    clock.advance(minutes=1)
    await one.converse(scope, msg("third, in process one"))
    said = person_said(fake.chat_requests[-1])
    assert [s for s in said if "process" in s] == [
        "first, in process one",
        "second, in process two",
        "third, in process one",
    ]


async def test_messages_kept_without_a_turn_reach_the_next_prompt(make_engine_for, fake, clock):
    """Over the rate limit, and a model failure: the member's words are in the next prompt."""
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=8192, rate_limit=2))
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("one"))
    await engine.converse(scope, msg("two"))
    limited = await engine.converse(scope, msg("three, over the limit"))
    assert "faster than I can keep up" in limited.replies[0]
    clock.advance(hours=2)
    fake.fail_next(500, times=5)
    failed = await engine.converse(scope, msg("four, the model is down"))
    assert failed.replies[0].startswith("Sorry, I can't think right now")
    clock.advance(minutes=1)
    await engine.converse(scope, msg("five"))
    said = person_said(fake.chat_requests[-1])
    words = said
    assert words == ["one", "two", "three, over the limit", "four, the model is down", "five"]
    replies = [m for m in fake.chat_requests[-1]["messages"] if m["role"] == "tool"]
    assert len(replies) == 2, "the failed turn left nothing behind"


async def test_an_import_or_a_reset_replaces_the_copy(make_engine_for, fake, clock, sessions):
    fake.brain = brain
    config = EngineConfig(context_window=8192, rate_limit=None)
    engine = make_engine_for(config)
    members = Members(sessions, config, clock)
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("before the import"))
    export = parse_export(
        {
            "format": "companion-export",
            "version": 1,
            "tenant": "t",
            "user": "u",
            "blocks": [{"label": "human", "value": "Imported person.", "limit": 2000}],
            "messages": [
                {
                    "role": "user",
                    "content": "imported words",
                    "created_at": "2026-01-01T00:00Z",
                    "in_context": True,
                }
            ],
            "passages": [],
        }
    )
    await members.admin_import("t", "operator", "u", export, replace=True)
    clock.advance(minutes=1)
    await engine.converse(scope, msg("after the import"))
    said = person_said(fake.chat_requests[-1])
    assert "before the import" not in said and "imported words" in said
    await members.admin_reset("t", "operator", "u")
    fresh = await engine.agent("t", "u")
    await engine.converse(fresh, msg("after the reset"))
    said = person_said(fake.chat_requests[-1])
    assert said == ["after the reset"]


async def test_counts_are_made_once_and_redone_only_for_another_basis(
    make_engine_for, fake, clock, sessions
):
    fake.brain = brain
    small = EngineConfig(context_window=8192, rate_limit=None)
    engine = make_engine_for(small)
    scope = await engine.agent("t", "u")
    long = " ".join(random.Random(5).choice(WORDS) for _ in range(4000))
    await engine.converse(scope, msg(long))
    async with sessions() as session:
        agent = await session.get(Agent, scope.agent_id)
        stored = await session.scalar(select(Message).where(Message.content == long))
    assert agent.count_basis == count_basis(small.max_message_tokens)
    assert stored.tokens == message_tokens(stored, small.max_message_tokens) < 2100

    # Same basis: a count is trusted (a marker value survives a turn in a new process).
    async with sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == stored.id).values(tokens=7))
    await make_engine_for(small).converse(scope, msg("again"))
    async with sessions() as session:
        assert await session.scalar(select(Message.tokens).where(Message.id == stored.id)) == 7

    # A larger window cuts long messages later: the whole queue is recounted once.
    large = EngineConfig(context_window=128_000, rate_limit=None)
    await make_engine_for(large).converse(scope, msg("with a larger window"))
    async with sessions() as session:
        agent = await session.get(Agent, scope.agent_id)
        recounted = await session.scalar(select(Message).where(Message.id == stored.id))
    assert agent.count_basis == count_basis(large.max_message_tokens)
    assert recounted.tokens == message_tokens(recounted, large.max_message_tokens) > 4000


async def test_a_failed_turn_keeps_the_previous_copy_valid(make_engine_for, fake, clock):
    """A turn rolled back after it appended: the next turn sees the database, not the turn."""
    fake.brain = brain
    engine = make_engine_for(EngineConfig(context_window=8192, rate_limit=None))
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("hello"))
    broken = 0

    def flaky(body):
        nonlocal broken
        if last(body)["role"] == "tool" and not broken:
            broken += 1
            raise ModelError("boom")  # the fake answers 500 to an exception
        return brain(body)

    fake.brain = flaky
    fake.fail_next(500, times=1)
    clock.advance(minutes=1)
    exchange = await engine.converse(scope, msg("remember I fly on Friday"))
    assert exchange.result is not None and exchange.result.error
    fake.brain = brain
    clock.advance(minutes=1)
    await engine.converse(scope, msg("and now?"))
    prompt = fake.chat_requests[-1]["messages"]
    assert not any(m.get("tool_calls") and "Friday" in str(m) for m in prompt)
    said = person_said(fake.chat_requests[-1])
    assert "remember I fly on Friday" in said and said.count("remember I fly on Friday") == 1


async def test_a_persons_block_edit_reaches_the_next_prompt(make_engine_for, fake, clock, sessions):
    """Working context is read every turn: an edit from the inspector shows at once, while
    the queue still comes from the kept copy."""
    fake.brain = brain
    config = EngineConfig(context_window=8192, rate_limit=None)
    engine = make_engine_for(config)
    members = Members(sessions, config, clock)
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("hello before the edit"))
    await members.edit_block("t", "u", "human", "Likes sailing on Saturdays.")
    clock.advance(minutes=1)
    await engine.converse(scope, msg("hello after the edit"))
    assert "Likes sailing on Saturdays." in fake.chat_requests[-1]["messages"][0]["content"]
    assert engine.mind.contexts.hits == 1
