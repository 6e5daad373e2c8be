"""The queue manager at work: the window is never exceeded, warnings come once per episode,
flushes leave about half the window with a recursive summary, and nothing is ever lost."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.memory.search import recall_search
from core.models import Message, Summary
from core.runtime.apologies import INTERNAL_ERROR_REPLY
from tests.fake_openai import (
    calls,
    completion,
    count_prompt,
    is_summary_request,
    last,
    last_user_text,
    say,
    summary_of,
    tool_call,
)

WINDOW = 4096
SMALL = EngineConfig(context_window=WINDOW, persona_limit=1000, human_limit=1000, rate_limit=None)
WORDS = "river lantern maple quartz velvet harbor ember saffron tundra orbit".split()


def chatty(body):
    if is_summary_request(body):
        return summary_of(body)
    return say(f"ok: {last_user_text(body)[:40]}")


def text_of(n_words: int, rng: random.Random, extra: str = "") -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    if n_words > 3:
        words[rng.randrange(n_words)] = "🦜ünïcødé"
    return f"{extra} {' '.join(words)}".strip()


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


def assert_within_window(fake, window: int = WINDOW, inflation: float = 1.0) -> None:
    for body in fake.requests:
        prompt = int(count_prompt(body) * inflation)
        assert prompt + (body.get("max_tokens") or 0) <= window, prompt


_examples = iter(range(10**6))


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(1, 3000), min_size=3, max_size=25), seed=st.integers(0, 99))
async def test_prompt_never_exceeds_window(make_engine_for, fake, sizes, seed):
    fake.brain = chatty
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", f"user{next(_examples)}")
    rng = random.Random(seed)
    before = len(fake.requests)
    for size in sizes:
        exchange = await engine.converse(scope, msg(text_of(size, rng)))
        assert exchange.replies, "every message is answered"
    assert len(fake.requests) > before
    assert_within_window(fake)


async def test_calibration_keeps_an_inflating_provider_inside_the_window(make_engine_for, fake):
    fake.brain = chatty
    fake.inflation = 1.4  # this provider's tokenizer counts 40% more than tiktoken
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    rng = random.Random(1)
    for _ in range(30):
        await engine.converse(scope, msg(text_of(rng.randint(50, 400), rng)))
    assert engine.mind.counter.ratio >= 1.3
    assert_within_window(fake, inflation=1.4)


async def _run_until_flushes(engine, scope, flushes: int, rng, limit: int = 200):
    results = []
    for i in range(limit):
        exchange = await engine.converse(scope, msg(text_of(120, rng, extra=f"note{i}")))
        results.append(exchange.result)
        if sum(r.flushes for r in results) >= flushes:
            return results
    raise AssertionError("no flush happened")


async def test_one_warning_per_pressure_episode(make_engine_for, fake):
    fake.brain = chatty
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    results = await _run_until_flushes(engine, scope, 3, random.Random(2))
    episode_warnings = 0
    episodes = []
    for result in results:
        episode_warnings += result.warnings
        if result.flushes:
            episodes.append(episode_warnings)
            episode_warnings = 0
    assert episodes == [1, 1, 1]
    alerts = [
        m["content"]
        for m in fake.chat_requests[-1]["messages"]
        if "memory pressure" in (m.get("content") or "")
    ]
    assert len(alerts) <= 1


async def test_flush_leaves_about_half_and_summaries_are_recursive(make_engine_for, fake, sessions):
    fake.brain = chatty
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    results = await _run_until_flushes(engine, scope, 2, random.Random(3))
    flushed = [r for r in results if r.flushes]
    for result in flushed:
        first_prompt = result.steps[0].prompt_tokens
        assert 0.25 * WINDOW <= first_prompt <= 0.55 * WINDOW, first_prompt
    summary_requests = [b for b in fake.requests if is_summary_request(b)]
    assert len(summary_requests) == 2
    first_summary = summary_of(summary_requests[0])["choices"][0]["message"]["content"]
    assert first_summary[:200] in summary_requests[1]["messages"][-1]["content"]
    async with sessions() as session:
        summaries = list(await session.scalars(select(Summary).order_by(Summary.id)))
        evicted = await session.scalar(
            select(func.count()).where(Message.agent_id == scope.agent_id, ~Message.in_context)
        )
    assert [s.covers_messages for s in summaries][-1] == evicted
    assert summaries[0].covers_messages < summaries[1].covers_messages
    # The newest prompt starts its queue with the newest summary.
    assert summaries[-1].text[:100] in fake.chat_requests[-1]["messages"][1]["content"]


async def test_nothing_is_lost_across_many_flushes(make_engine_for, fake, sessions):
    fake.brain = chatty
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    rng = random.Random(4)
    sent = [text_of(150, rng, extra=f"entry{i}") for i in range(45)]
    flushes = 0
    for text in sent:
        flushes += (await engine.converse(scope, msg(text))).result.flushes
    assert flushes >= 4
    async with sessions() as session:
        stored = list(
            await session.scalars(
                select(Message.content)
                .where(Message.agent_id == scope.agent_id, Message.role == "user")
                .order_by(Message.id)
            )
        )
    assert stored == sent
    assert_within_window(fake)


async def test_evicted_messages_are_found_again_by_search_with_paging(make_engine_for, fake):
    def brain(body):
        if is_summary_request(body):
            return summary_of(body)
        text = last_user_text(body)
        newest = last(body)
        if newest["role"] == "tool":
            return say("found: " + newest["content"])
        if text.startswith("search "):
            _, query, page = text.split()
            return calls(tool_call("conversation_search", query=query, page=int(page)))
        return say("ok")

    fake.brain = brain
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    rng = random.Random(5)
    for i in range(7):
        await engine.converse(scope, msg(f"my zebra story part {i}: " + text_of(30, rng)))
    await _run_until_flushes(engine, scope, 2, rng)
    async with engine.sessions() as session:
        in_view = await session.scalar(
            select(func.count()).where(
                Message.agent_id == scope.agent_id,
                Message.in_context,
                Message.content.contains("zebra"),
            )
        )
    assert in_view == 0, "the zebra messages were evicted"
    first = (await engine.converse(scope, msg("search zebra 1"))).replies[0]
    second = (await engine.converse(scope, msg("search zebra 2"))).replies[0]
    assert "page 1 of 2" in first and "page 2 of 2" in second
    found = {f"part {i}" for i in range(7) if f"part {i}:" in first + second}
    assert len(found) >= 6  # the model's own "ok" replies are not about zebras
    async with engine.sessions() as session:
        page = await recall_search(session, scope, "zebra stories", page=1)
    assert page.total >= 7


@pytest.mark.parametrize("window", [4096, 16384])
async def test_fresh_agent_first_prompt_is_small(make_engine_for, fake, window):
    fake.brain = chatty
    engine = make_engine_for(EngineConfig(context_window=window))
    scope = await engine.agent("t", "fresh")
    await engine.converse(scope, msg("hi"))
    assert count_prompt(fake.chat_requests[0]) < 1500


def _summarising(summary: str):
    """A brain whose summaries say `summary` and whose answers echo the member."""

    def brain(body):
        if is_summary_request(body):
            return completion(summary)
        return say(f"ok: {last_user_text(body)[:40]}")

    return brain


async def test_a_summary_with_nul_or_a_lone_surrogate_is_stored_cleaned(make_engine_for, fake):
    """Postgres text holds neither: a summary answer with them sank the flush, every turn
    that needed it, and the handler's own recovery (the member got nothing at all)."""

    fake.brain = _summarising("Summary: tea\x00 and \ud800 biscuits")
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")

    results = await _run_until_flushes(engine, scope, 2, random.Random(3))

    assert all(r.replies and r.replies[0].startswith("ok: ") for r in results)
    assert (
        "Summary: tea\ufffd and \ufffd biscuits" in fake.chat_requests[-1]["messages"][1]["content"]
    )


async def test_a_database_error_in_a_flush_still_gets_the_member_an_apology(
    make_engine_for, fake, monkeypatch
):
    """A statement Postgres refuses while the turn flushes (here a summary it cannot store,
    as before the summary was cleaned) fails the turn; the handler must still answer, not
    fail itself reading the event the failed transaction left behind."""
    monkeypatch.setattr("core.memory.summarize.clean_text", lambda text: text)

    fake.brain = _summarising("Summary: tea\x00 and biscuits")
    engine = make_engine_for(SMALL)
    scope = await engine.agent("t", "u")
    rng = random.Random(3)

    replies = []
    for _ in range(40):
        exchange = await engine.converse(scope, msg(text_of(rng.randint(50, 300), rng)))
        replies.append(exchange.replies)
        if exchange.replies == [INTERNAL_ERROR_REPLY]:
            break
    assert replies[-1] == [INTERNAL_ERROR_REPLY], replies[-3:]
