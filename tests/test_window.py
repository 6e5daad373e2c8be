"""The window holds on every path: whatever the database holds, no prompt exceeds it.

Messages that enter the FIFO queue without a turn (rate-limited, over budget, model failure,
import) are counted like any other; the assembler flushes or cuts whatever state it is
given; a provider that still says the prompt is too long gets a flush and one retry.
"""

from __future__ import annotations

import json
import random

import openai
import pytest
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from sqlalchemy import select, update

from bot.migrations import MIGRATIONS
from core.config import EngineConfig
from core.errors import ModelError, PromptTooLong
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.members.portability import import_agent, parse_export
from core.memory.prompt import message_tokens, render
from core.memory.tokens import TokenCounter
from core.models import Agent, Message, Usage
from core.runtime.apologies import MODEL_DOWN_REPLY
from tests.fake_openai import (
    count_prompt,
    is_summary_request,
    last_user_text,
    say,
    summary_of,
)

WINDOW = 8192
WORDS = (
    "river lantern maple quartz velvet harbor ember saffron tundra orbit meadow cobalt "
    "falcon juniper prism thistle canyon walnut glacier sparrow"
).split()


def chatty(body):
    if is_summary_request(body):
        return summary_of(body)
    return say(f"You said: {last_user_text(body)[:60]}")


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


def long_text(rng: random.Random, words: int, tag: str) -> str:
    return f"{tag}: " + " ".join(rng.choice(WORDS) for _ in range(words))


def largest_prompt(fake) -> int:
    """The most tokens any request asked of the model: its prompt plus the reply's room."""
    return max(count_prompt(b) + (b.get("max_tokens") or 0) for b in fake.requests)


async def over_budget_for_a_day(make_engine_for, fake, clock, messages: int = 30):
    """A member spends the day's budget, writes `messages` long messages, then next day."""
    fake.brain = chatty
    config = EngineConfig(context_window=WINDOW, member_daily_tokens=1000, rate_limit=None)
    engine = make_engine_for(config)
    scope = await engine.agent("t", "u")
    await engine.converse(scope, msg("hello"))  # a fresh agent's turn: ~1,100 tokens
    rng = random.Random(8)
    for i in range(messages):
        limited = await engine.converse(scope, msg(long_text(rng, 1300, f"letter {i}")))
        assert "thinking budget" in limited.replies[0]
    clock.advance(days=1)
    return engine, scope, await engine.converse(scope, msg("good morning"))


async def test_messages_stored_without_a_turn_are_counted(make_engine_for, fake, clock, sessions):
    await over_budget_for_a_day(make_engine_for, fake, clock, messages=3)
    config = EngineConfig(context_window=WINDOW)
    async with sessions() as session:
        stored = list(await session.scalars(select(Message).order_by(Message.id)))
    letters = [m for m in stored if (m.content or "").startswith("letter")]
    assert len(letters) == 3
    for message in letters:
        expected = TokenCounter().count_message(render(message, config.max_message_tokens))
        assert message.tokens == expected > 1500


async def test_thirty_long_messages_over_budget_do_not_break_the_agent(
    make_engine_for, fake, clock
):
    fake.context_window = WINDOW  # a strict provider: 400 context_length_exceeded
    engine, scope, morning = await over_budget_for_a_day(make_engine_for, fake, clock)
    assert morning.replies == ["You said: good morning"]
    assert largest_prompt(fake) <= WINDOW
    assert morning.result is not None and morning.result.flushes == 1
    clock.advance(days=1)
    again = await engine.converse(scope, msg("still there?"))
    assert again.replies == ["You said: still there?"]


async def test_a_lenient_provider_never_gets_an_over_window_prompt(make_engine_for, fake, clock):
    _, _, morning = await over_budget_for_a_day(make_engine_for, fake, clock)
    assert morning.replies == ["You said: good morning"]
    assert largest_prompt(fake) <= WINDOW


class Recorded:
    """A Metrics port that keeps the counts."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(self, metric, amount: float = 1, **labels: str) -> None:
        self.counts[str(metric)] = self.counts.get(str(metric), 0) + amount

    def observe(self, metric, seconds: float, **labels: str) -> None:
        pass


def reported(fake, summaries: bool | None = None) -> tuple[int, int]:
    """(prompt, completion) tokens the fake reported, over all or only summary requests."""
    bodies = [b for b in fake.requests if summaries is None or is_summary_request(b) == summaries]
    return sum(count_prompt(b) for b in bodies), 10 * len(bodies)


async def test_summary_calls_count_in_usage_metrics_and_the_turn(make_engine_for, fake, sessions):
    fake.brain = chatty
    engine = make_engine_for(EngineConfig(context_window=WINDOW, rate_limit=None))
    metrics = engine.mind.metrics = Recorded()
    scope = await engine.agent("t", "u")
    rng = random.Random(6)
    turn_tokens = 0
    for i in range(14):
        exchange = await engine.converse(scope, msg(long_text(rng, 700, f"entry {i}")))
        assert exchange.result is not None
        turn_tokens += exchange.result.tokens
    summary_prompt, summary_completion = reported(fake, summaries=True)
    assert summary_prompt > 0, "the window was flushed at least once"
    prompt, completion = reported(fake)
    async with sessions() as session:
        usage = await session.scalar(select(Usage.tokens).where(Usage.agent_id == scope.agent_id))
        calls = await session.scalar(select(Usage.calls).where(Usage.agent_id == scope.agent_id))
    assert usage == turn_tokens == prompt + completion
    assert calls == len(fake.requests)
    assert metrics.counts["prompt_tokens_total"] == prompt
    assert metrics.counts["completion_tokens_total"] == completion


async def test_a_legacy_queue_of_uncounted_messages_still_fits(
    make_engine_for, fake, clock, sessions
):
    """Rows stored before every path counted (tokens = 0) are recounted, not trusted.

    Such rows come from an older version, whose agent rows have no count basis yet (the
    migration leaves it empty), read by a newly started process.
    """
    fake.context_window = WINDOW
    fake.brain = chatty
    config = EngineConfig(context_window=WINDOW, rate_limit=None)
    engine = make_engine_for(config)
    scope = await engine.agent("t", "u")
    rng = random.Random(9)
    for i in range(12):
        await engine.converse(scope, msg(long_text(rng, 500, f"story {i}")))
    async with sessions() as session, session.begin():
        await session.execute(update(Message).values(tokens=0, in_context=True))
        await session.execute(update(Agent).values(count_basis=None))
    reply = await make_engine_for(config).converse(scope, msg("and now?"))
    assert reply.replies == ["You said: and now?"]
    assert largest_prompt(fake) <= WINDOW


def recount_migration():
    """This branch's migration module, found by name (its number may change at merge)."""
    script = ScriptDirectory(str(MIGRATIONS))
    [revision] = [r for r in script.walk_revisions() if "window_recount" in (r.path or "")]
    return revision.module


async def test_the_migration_counts_messages_stored_uncounted(engine, fake, sessions):
    scope = await engine.agent("t", "u")
    rng = random.Random(10)
    for i in range(4):
        await engine.converse(scope, msg(long_text(rng, 300 * (i + 1), f"note {i}")))
    async with sessions() as session, session.begin():
        await session.execute(update(Message).values(tokens=0, in_context=Message.role != "tool"))

    def migrate(connection) -> None:
        with Operations.context(MigrationContext.configure(connection)):
            recount_migration().upgrade()

    async with sessions() as session, session.begin():
        await (await session.connection()).run_sync(migrate)
    async with sessions() as session:
        stored = list(await session.scalars(select(Message).order_by(Message.id)))
    assert {m.tokens for m in stored if not m.in_context} == {0}, "out of the queue: left alone"
    queued = [m for m in stored if m.in_context]
    assert len(queued) >= 8
    for message in queued:
        assert message.tokens == message_tokens(message, 10**12) > 0


async def test_a_refused_prompt_flushes_and_retries_once(make_engine_for, fake):
    """A provider that suddenly counts half as much again: refused, then answered."""
    fake.context_window = WINDOW
    fake.brain = chatty
    engine = make_engine_for(EngineConfig(context_window=WINDOW, rate_limit=None))
    scope = await engine.agent("t", "u")
    rng = random.Random(11)
    for i in range(9):
        await engine.converse(scope, msg(long_text(rng, 450, f"page {i}")))
    assert largest_prompt(fake) > 0.6 * WINDOW, "the queue is near the budget"
    assert engine.mind.counter.ratio == 1.0
    fake.inflation = 1.5  # e.g. the deployment switched to a model with another tokenizer
    before = len(fake.requests)
    exchange = await engine.converse(scope, msg("are you there?"))
    assert exchange.replies == ["You said: are you there?"]
    assert exchange.result is not None and exchange.result.flushes >= 1
    assert engine.mind.counter.ratio >= 1.4
    sent = fake.requests[before:]
    refused = [b for b in sent if int(count_prompt(b) * 1.5) + b["max_tokens"] > WINDOW]
    assert len(refused) == 1, "one refusal, then prompts that fit"


async def test_twice_refused_gives_the_apology_and_keeps_the_message(make_engine_for, fake):
    engine = make_engine_for(EngineConfig(context_window=WINDOW, rate_limit=None))
    scope = await engine.agent("t", "u")
    too_long = {"error": {"message": "prompt too long", "code": "context_length_exceeded"}}
    fake.fail_next(400, json.dumps(too_long), times=2)
    exchange = await engine.converse(scope, msg("hello?"))
    assert exchange.replies == [MODEL_DOWN_REPLY]  # the server's words stay in the log
    assert exchange.result and "longer than its context window" in str(exchange.result.error)
    assert len(fake.requests) == 2
    assert (await engine.converse(scope, msg("again"))).replies == ["You said: again"]


@pytest.mark.parametrize(
    "body, prompt_tokens",
    [
        (
            {
                "message": "This model's maximum context length is 8192 tokens. However, your "
                "messages resulted in 9,876 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            9876,
        ),
        (  # vLLM
            {
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 4500 tokens (4000 in the messages, 500 in the completion).",
                "type": "BadRequestError",
                "code": 400,
            },
            4000,
        ),
        (  # llama.cpp
            {
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "code": 400,
            },
            None,
        ),
    ],
)
async def test_servers_saying_the_prompt_is_too_long(fake, body, prompt_tokens):
    fake.fail_next(400, json.dumps({"error": body}))
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="t", max_retries=0) as client:
        with pytest.raises(PromptTooLong) as raised:
            await OpenAIChat(client, "fake").complete([{"role": "user", "content": "hi"}])
    assert raised.value.prompt_tokens == prompt_tokens


async def test_other_bad_requests_are_not_taken_for_a_long_prompt(fake):
    fake.fail_next(400, json.dumps({"error": {"message": "invalid 'tools': bad schema"}}))
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="t", max_retries=0) as client:
        with pytest.raises(ModelError) as raised:
            await OpenAIChat(client, "fake").complete([{"role": "user", "content": "hi"}])
    assert not isinstance(raised.value, PromptTooLong)


async def test_a_huge_import_fits_at_the_next_turn(engine, fake, sessions, clock):
    fake.context_window = WINDOW
    fake.brain = chatty
    rng = random.Random(12)
    doc = {
        "format": "companion-export",
        "version": 1,
        "blocks": [{"label": "human", "value": "Imported.", "limit": 2000}],
        "messages": [
            {
                "role": "user",
                "content": long_text(rng, 400, f"old {i}"),
                "created_at": f"2026-01-01T12:{i:02d}:00+00:00",
                "in_context": True,
            }
            for i in range(60)
        ],
        "passages": [],
    }
    scope = await engine.agent("t", "u")
    async with sessions() as session, session.begin():
        await import_agent(session, scope, parse_export(doc), engine.mind.config, clock())
    exchange = await engine.converse(scope, msg("remember me?"))
    assert exchange.replies == ["You said: remember me?"]
    assert largest_prompt(fake) <= WINDOW


async def test_the_newest_message_is_cut_when_nothing_else_can_go(make_engine_for, fake):
    """A provider counting double leaves no room for a long message even after a flush."""
    fake.brain = chatty
    fake.inflation = 2.0
    fake.context_window = 4096
    config = EngineConfig(
        context_window=4096, persona_limit=1000, human_limit=1000, rate_limit=None
    )
    engine = make_engine_for(config)
    scope = await engine.agent("t", "u")
    assert (await engine.converse(scope, msg("hi"))).replies == ["You said: hi"]
    assert engine.mind.counter.ratio > 1.9  # calibrated by the first answer
    long = long_text(random.Random(13), 3000, "my long story")
    exchange = await engine.converse(scope, msg(long))
    assert exchange.replies == [f"You said: {long[:60]}"]
    newest = last_user_text(fake.chat_requests[-1])
    assert newest.startswith("my long story") and "[... cut here:" in newest

    for body in fake.requests:
        assert int(count_prompt(body) * 2.0) + body["max_tokens"] <= 4096
