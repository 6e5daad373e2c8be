"""Knowing the bill: cached prompt tokens recorded per call beside prompt and completion
tokens (usage, metrics, `--verbose`, summary calls included), `companion usage`, a price
table the operator can amend, and budgets in dollars."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from bot.settings import Settings
from core.config import EngineConfig
from core.errors import ConfigError
from core.events import EventKind, InboundEvent
from core.models import Usage
from core.prices import DEFAULT_PRICES, Price, Spent, parse_prices, price_for
from tests.conftest import cli_env, run_cli
from tests.fake_openai import is_summary_request, last_user_text, say, summary_of

WORDS = "river lantern maple quartz velvet harbor ember saffron tundra orbit meadow".split()


def chatty(body):
    if is_summary_request(body):
        return summary_of(body)
    return say(f"You said: {last_user_text(body)[:30]}")


def msg(text: str) -> InboundEvent:
    return InboundEvent(EventKind.USER_MESSAGE, text)


class Recorded:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(self, metric, amount: float = 1, **labels: str) -> None:
        self.counts[str(metric)] = self.counts.get(str(metric), 0) + amount

    def observe(self, metric, seconds: float, **labels: str) -> None:
        pass


async def test_cached_tokens_are_recorded_beside_prompt_and_completion(
    make_engine_for, fake, clock, sessions
):
    fake.brain, fake.prompt_cache = chatty, True
    reported: list[dict] = []
    brain = fake.brain

    def recording(body):
        answer = brain(body)
        reported.append(body)
        return answer

    fake.brain = recording
    engine = make_engine_for(EngineConfig(context_window=4096, rate_limit=None))
    metrics = engine.mind.metrics = Recorded()
    scope = await engine.agent("t", "u")
    rng = random.Random(2)
    results = []
    for _ in range(25):
        clock.advance(minutes=3)
        text = " ".join(rng.choice(WORDS) for _ in range(60))
        results.append((await engine.converse(scope, msg(text))).result)

    calls = [c for r in results for c in r.calls]
    assert len(calls) == len(fake.requests)
    assert {c.purpose for c in calls} == {"chat", "summary"}, "the queue was flushed"
    cached = sum(c.cached_tokens for c in calls)
    assert cached > 0.5 * sum(c.prompt_tokens for c in calls if c.purpose == "chat")
    async with sessions() as session:
        usage = await session.scalar(select(Usage).where(Usage.agent_id == scope.agent_id))
    assert usage.cached_tokens == cached
    assert usage.completion_tokens == 10 * len(fake.requests)
    assert usage.tokens == sum(c.prompt_tokens + c.completion_tokens for c in calls)
    assert metrics.counts["cached_prompt_tokens_total"] == cached
    assert metrics.counts["prompt_tokens_total"] == sum(c.prompt_tokens for c in calls)


async def test_a_budget_in_dollars_counts_cached_input_at_its_price(make_engine_for, fake, clock):
    """$1 per million fresh input tokens, nothing for cached ones: caching stretches it."""
    fake.brain, fake.prompt_cache = chatty, True
    price = Price(input=1.0, cached_input=0.0, output=0.0)
    config = EngineConfig(context_window=8192, rate_limit=None, price=price)
    engine = make_engine_for(config.__class__(**{**config.__dict__, "member_daily_usd": 0.004}))
    scope = await engine.agent("t", "u")
    answered = 0
    for i in range(10):
        clock.advance(minutes=3)
        exchange = await engine.converse(scope, msg(f"message {i}"))
        if "thinking budget" in exchange.replies[0]:
            break
        answered += 1
    # ~1,100 fresh tokens for the first call, then at most ~250 fresh each ($0.0034 in all).
    assert answered == 10, "cached input is free here"
    clock.advance(days=1)
    fake.prompt_cache = False  # now every token is fresh: ~1,400 of them, $0.0014 a call
    answered = 0
    for i in range(6):
        clock.advance(minutes=3)
        if "thinking budget" in (await engine.converse(scope, msg(f"again {i}"))).replies[0]:
            break
        answered += 1
    assert answered == 3


def test_prices_parse_and_apply():
    table = parse_prices("my-model=0.5/0.05/2, gpt-4o-mini=0.1/0.01/0.4")
    assert table["my-model"] == Price(0.5, 0.05, 2.0)
    assert price_for("openai/gpt-4o-mini-2024-07-18", table) == Price(0.1, 0.01, 0.4)
    assert price_for("gpt-4o-2024-08-06") == DEFAULT_PRICES["gpt-4o"]
    assert price_for("gpt-4.1-mini") == DEFAULT_PRICES["gpt-4.1-mini"]
    assert price_for("llama3.1:8b") is None
    spent = Spent(tokens=1_010_000, cached=600_000, completion=10_000)
    assert spent.uncached == 400_000
    assert spent.cost(Price(1.0, 0.1, 10.0)) == pytest.approx(0.4 + 0.06 + 0.1)
    with pytest.raises(ConfigError, match="model=input/cached/output"):
        parse_prices("gpt-4o=cheap")


def test_a_dollar_budget_needs_a_price():
    env = {"COMPANION_MODEL": "my-local", "OPENAI_BASE_URL": "http://x"}
    settings = Settings.from_env({**env, "COMPANION_MEMBER_DAILY_USD": "$2.50"})
    assert settings.member_daily_usd == 2.5
    with pytest.raises(ConfigError, match="COMPANION_PRICES=my-local="):
        settings.require_model()
    priced = Settings.from_env(
        {**env, "COMPANION_MEMBER_DAILY_USD": "2.5", "COMPANION_PRICES": "my-local=1/0.1/2"}
    )
    priced.require_model()
    assert priced.engine_config().price == Price(1.0, 0.1, 2.0)
    with pytest.raises(ConfigError, match="COMPANION_TENANT_DAILY_USD"):
        Settings.from_env({**env, "COMPANION_TENANT_DAILY_USD": "lots"})


async def test_companion_usage_prints_tokens_and_cost_per_member_and_day(fake, pg_url, schema):
    fake.brain, fake.prompt_cache = chatty, True
    env = cli_env(fake, pg_url, schema, COMPANION_PRICES="fake=2/0.5/8")
    for user in ("ann", "bob"):
        lines = "".join(f"hello number {i}\n" for i in range(4))
        run = await run_cli(env, "chat", "--user", user, stdin=lines)
        assert run.code == 0, run
    run = await run_cli(env, "usage", "--days", "3")
    assert run.code == 0, run
    out = run.out.splitlines()
    header = out[1].split()
    assert header[:4] == ["day", "tenant", "member", "calls"]
    rows = {line.split()[2]: line.split() for line in out[2:-1]}
    assert set(rows) == {"ann", "bob", "(all)"}
    _, tenant, _, calls, fresh, cached, output, cost = rows["ann"]
    assert tenant == "local" and calls == "4" and output == "40"
    # Calls 3 and 4 read the prefix from cache (call 2 shares just under OpenAI's 1,024).
    assert int(cached.replace(",", "")) >= 2 * 1024
    spent = Spent(
        int(fresh.replace(",", "")) + int(cached.replace(",", "")) + 40,
        int(cached.replace(",", "")),
        40,
    )
    assert cost == f"${spent.cost(Price(2, 0.5, 8)):,.4f}"
    assert rows["(all)"][3] == "8"
    assert "fake's price" in out[-1]

    run = await run_cli(env, "usage", "--tenant", "elsewhere")
    assert run.code == 0 and run.out.startswith("no model usage recorded in elsewhere")
    unpriced = cli_env(fake, pg_url, schema)
    run = await run_cli(unpriced, "usage")
    assert run.code == 0 and run.out.splitlines()[2].endswith("?")
    assert "COMPANION_PRICES=fake=" in run.out.splitlines()[-1]


async def test_verbose_shows_each_calls_tokens(fake, pg_url, schema):
    fake.brain, fake.prompt_cache = chatty, True
    env = cli_env(fake, pg_url, schema)
    run = await run_cli(env, "chat", "--verbose", stdin="hi\nhello again\nand again\n")
    assert run.code == 0, run
    shown = [line.strip() for line in run.err.splitlines() if "call:" in line]
    assert len(shown) == 3 and all(s.startswith("[chat call: ") for s in shown)
    assert "(0 cached), 10 output]" in shown[0] and "(1,024 cached), 10 output]" in shown[2]
