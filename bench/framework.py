"""Framework overhead per message, model calls per message, and the size of a first prompt.

    python bench/framework.py [--messages 300] [--agents 50] [--context-window 8192]

(a) Framework time per message: `Engine.converse` with an in-process chat model that answers
    at once (one `send_message` call); the time spent inside the model is measured and taken
    off. One agent, then many agents served round-robin.
(b) The same through the real `openai` client against `tests.fake_openai.FakeOpenAI` on
    loopback: wall time per message including HTTP (the fake runs in this process).
(c) Model calls per plain chat message with the fake's default brain, and events per second
    (one agent in sequence, and several agents at once).
(d) Prompt tokens of a fresh agent's first call, as the fake provider counts them, with a
    breakdown: instructions, tool schemas, working-context blocks, the rest.

Prints numbers only; no assertions. Starts an embedded Postgres in a temporary directory
unless --database-url is given (then it works in a throwaway schema).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from sqlalchemy import event
from sqlalchemy.ext.asyncio import async_sessionmaker

from bench.common import (
    Database,
    InstantModel,
    bench_database,
    chat_line,
    machine,
    revision,
    server_version,
    settings_block,
    stats_ms,
    table,
)
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.memory.prompt import INSTRUCTIONS
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.memory.window import check_window, tools_tokens
from core.ports import ChatModel, Completion
from core.runtime.engine import Engine
from core.scope import Scope
from tests.fake_openai import FakeOpenAI, count_prompt, default_brain

# ---------------------------------------------------------------- models


def plain_line(rng: random.Random) -> str:
    """A chat line the fake's default brain answers with one send_message (no memory tools)."""
    while True:
        line = chat_line(rng)
        if not line.lower().startswith(("remember", "what did i say about", "what do you know")):
            return line


class Timed:
    """Wraps a ChatModel and adds up the wall time spent inside `complete`."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.seconds = 0.0
        self.calls = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        start = time.perf_counter()
        try:
            return await self.model.complete(messages, tools, max_tokens, cache_key)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


class StepClock:
    """The engine's clock: moves on --gap minutes per message, as a member typing would.

    Keeps per-member rate limits (EngineConfig.rate_limit) from turning messages away.
    """

    def __init__(self, minutes: float) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        self.step = timedelta(minutes=minutes)

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> None:
        self.now += self.step


class StatementCounter:
    """Counts SQL statements sent through a SQLAlchemy engine."""

    def __init__(self, db: Database) -> None:
        self.n = 0
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.n += 1


# ---------------------------------------------------------------- runs


@dataclass
class Run:
    total: list[float]  # seconds per message, end to end
    model: list[float]  # seconds per message inside the model
    calls: int
    statements: int
    flushes: int

    @property
    def framework(self) -> list[float]:
        return [t - m for t, m in zip(self.total, self.model, strict=True)]


async def make_agents(engine: Engine, tenant: str, n: int) -> list[Scope]:
    return [await engine.agent(tenant, f"member-{i}") for i in range(n)]


async def say(engine: Engine, clock: StepClock, timed: Timed, scope: Scope, text: str) -> Any:
    """One message through Engine.converse; it must reach the model (not be turned away)."""
    clock.tick()
    calls = timed.calls
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    if timed.calls == calls or not exchange.replies:
        error = exchange.result.error if exchange.result else "no result"
        raise SystemExit(f"a message did not reach the model ({error}); results would be wrong")
    return exchange


async def run_messages(
    engine: Engine,
    clock: StepClock,
    timed: Timed,
    sql: StatementCounter,
    scopes: list[Scope],
    n: int,
    warmup: int,
    rng: random.Random,
) -> Run:
    """Send warmup + n messages round-robin over `scopes`, one at a time; time the last n."""
    total, model, flushes = [], [], 0
    calls0 = statements0 = 0
    for i in range(warmup + n):
        if i == warmup:
            calls0, statements0 = timed.calls, sql.n
        scope, text = scopes[i % len(scopes)], plain_line(rng)
        in_model = timed.seconds
        start = time.perf_counter()
        exchange = await say(engine, clock, timed, scope, text)
        took = time.perf_counter() - start
        if i >= warmup:
            total.append(took)
            model.append(timed.seconds - in_model)
            flushes += exchange.result.flushes if exchange.result else 0
    return Run(total, model, timed.calls - calls0, sql.n - statements0, flushes)


def run_row(label: str, run: Run, series: list[float]) -> list[object]:
    s = stats_ms(series)
    n = len(run.total)
    return [
        label,
        n,
        s["median"],
        s["p95"],
        s["mean"],
        f"{run.calls / n:.2f}",
        f"{run.statements / n:.1f}",
        run.flushes,
    ]


HEADERS = ["run", "messages", "median ms", "p95 ms", "mean ms", "calls/msg", "SQL/msg", "flushes"]


def build(
    db: Database, model: ChatModel, config: EngineConfig, args: argparse.Namespace
) -> tuple[Engine, StepClock, Timed]:
    """An Engine on the bench database with a timed model and a stepping clock."""
    sessions = async_sessionmaker(db.engine, expire_on_commit=False)
    timed, clock = Timed(model), StepClock(args.gap)
    return Engine(sessions, Mind(timed, TokenCounter(), config), clock), clock, timed


async def part_a(db: Database, config: EngineConfig, args: argparse.Namespace) -> None:
    engine, clock, timed = build(db, InstantModel(), config, args)
    sql = StatementCounter(db)
    rng = random.Random(args.seed)
    scopes = await make_agents(engine, "a-one", 1)
    one = await run_messages(engine, clock, timed, sql, scopes, args.messages, args.warmup, rng)
    scopes = await make_agents(engine, "a-many", args.agents)
    many = await run_messages(engine, clock, timed, sql, scopes, args.messages, args.warmup, rng)
    print("\n(a) Framework time per message (Engine.converse minus time inside the model)")
    print("    instant in-process model; one message at a time")
    print(
        table(
            HEADERS,
            [
                run_row("1 agent", one, one.framework),
                run_row(f"{args.agents} agents round-robin", many, many.framework),
            ],
        )
    )
    model_ms = 1000 * sum(one.model + many.model) / (len(one.model) + len(many.model))
    print(f"    time inside the instant model: {model_ms:.3f} ms per message on average")


async def part_b(db: Database, config: EngineConfig, args: argparse.Namespace) -> None:
    sql = StatementCounter(db)
    rng = random.Random(args.seed + 1)
    async with (
        FakeOpenAI(default_brain, embedding_dim=16) as fake,
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0) as client,
    ):
        engine, clock, timed = build(db, OpenAIChat(client, "fake"), config, args)
        scopes = await make_agents(engine, "b-one", 1)
        one = await run_messages(engine, clock, timed, sql, scopes, args.messages, args.warmup, rng)
    print("\n(b) Through the real openai client to FakeOpenAI on loopback (same process)")
    print(
        table(
            ["part", "median ms", "p95 ms", "mean ms", "max ms"],
            [
                ["wall time per message", *stats_ms(one.total).values()],
                ["  inside OpenAIChat.complete (HTTP + fake)", *stats_ms(one.model).values()],
                ["  the rest (framework, event loop)", *stats_ms(one.framework).values()],
            ],
        )
    )
    print(
        f"    {len(one.total)} messages to 1 agent after a {args.warmup}-message warm-up; "
        f"{one.calls / len(one.total):.2f} model calls per message; {one.flushes} flushes"
    )


async def part_c(db: Database, config: EngineConfig, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed + 2)
    async with (
        FakeOpenAI(default_brain, embedding_dim=16) as fake,
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0) as client,
    ):
        engine, clock, timed = build(db, OpenAIChat(client, "fake"), config, args)
        scope = await engine.agent("c-calls", "member")
        start = time.perf_counter()
        for _ in range(args.chat_messages):
            await say(engine, clock, timed, scope, plain_line(rng))
        sequential = time.perf_counter() - start
        chat = len(fake.chat_requests)
        summaries = len(fake.requests) - chat

        scopes = await make_agents(engine, "c-parallel", args.parallel_agents)
        per_agent = args.parallel_messages

        async def talk(scope: Scope) -> None:
            for _ in range(per_agent):
                await say(engine, clock, timed, scope, plain_line(rng))

        start = time.perf_counter()
        await asyncio.gather(*(talk(s) for s in scopes))
        parallel = time.perf_counter() - start
    n = args.chat_messages
    print("\n(c) Model calls per plain chat message (FakeOpenAI default brain, real client)")
    print(
        table(
            ["measure", "value"],
            [
                ["messages", n],
                ["chat calls (with tools)", chat],
                ["summary calls (no tools)", summaries],
                ["model calls per message", f"{(chat + summaries) / n:.2f}"],
                ["events/s, 1 agent in sequence", f"{n / sequential:.1f}"],
                [
                    f"events/s, {len(scopes)} agents at once x {per_agent} messages",
                    f"{len(scopes) * per_agent / parallel:.1f}",
                ],
            ],
        )
    )


async def part_d(db: Database, config: EngineConfig, args: argparse.Namespace) -> None:
    async with (
        FakeOpenAI(default_brain, embedding_dim=16) as fake,
        openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0) as client,
    ):
        engine, clock, timed = build(db, OpenAIChat(client, "fake"), config, args)
        scope = await engine.agent("d-fresh", "member")
        await say(engine, clock, timed, scope, "Hi! I'm Sam.")
        body = fake.requests[0]
    count = TokenCounter.count
    system = body["messages"][0]["content"]
    assert system.startswith(INSTRUCTIONS), "the system prompt no longer starts with INSTRUCTIONS"
    blocks_text = system[len(INSTRUCTIONS) :]
    status = str(body["messages"][-1]["content"])  # the status alert ends every prompt
    total = count_prompt(body)
    instructions = count(INSTRUCTIONS)
    schemas = tools_tokens()
    blocks = count(blocks_text.strip())
    rest = total - instructions - schemas - blocks
    others = [m for m in body["messages"][1:]]
    print("\n(d) Prompt tokens of a fresh agent's first call (as the fake provider counts them)")
    print(
        table(
            ["part", "tokens", "share"],
            [
                [
                    "instructions (core.prompt.INSTRUCTIONS)",
                    instructions,
                    f"{instructions / total:.0%}",
                ],
                [
                    f"tool schemas ({len(body['tools'])} functions)",
                    schemas,
                    f"{schemas / total:.0%}",
                ],
                ["working-context blocks (persona, human)", blocks, f"{blocks / total:.0%}"],
                ["the rest (status alert, user message, framing)", rest, f"{rest / total:.0%}"],
                ["total (tests.fake_openai.count_prompt)", total, "100%"],
            ],
        )
    )
    print(
        f"    status alert: {count(status)} tokens; "
        f"{len(others)} message(s) after the system prompt"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--messages", type=int, default=300, help="timed messages per run")
    parser.add_argument("--warmup", type=int, default=20, help="untimed messages first")
    parser.add_argument("--agents", type=int, default=50, help="agents in the round-robin run")
    parser.add_argument("--chat-messages", type=int, default=50, help="messages for (c)")
    parser.add_argument("--parallel-agents", type=int, default=10, help="agents at once in (c)")
    parser.add_argument("--parallel-messages", type=int, default=10, help="messages each in (c)")
    parser.add_argument("--context-window", type=int, default=8192)
    parser.add_argument("--gap", type=float, default=3.0, help="engine-clock minutes per message")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    config = EngineConfig(context_window=args.context_window)
    check_window(config)
    async with bench_database(args.database_url, pool_size=10) as db:
        print(
            settings_block(
                "Settings",
                {
                    "database": f"{db.where} ({await server_version(db.engine)})",
                    "machine": machine(),
                    "code": revision(),
                    "engine config": "EngineConfig() defaults, "
                    f"context_window={config.context_window}",
                    "messages": f"{args.messages} timed after {args.warmup} warm-up, one at a time",
                    "agents": f"1, and {args.agents} round-robin",
                    "(c)": f"{args.chat_messages} messages to 1 agent; "
                    f"{args.parallel_agents} agents x {args.parallel_messages} messages at once",
                    "message text": f"1-3 generated English sentences (seed {args.seed})",
                    "engine clock": f"advances {args.gap} minutes per message",
                    "timer": "time.perf_counter",
                },
            )
        )
        await part_a(db, config, args)
        await part_b(db, config, args)
        await part_c(db, config, args)
        await part_d(db, config, args)


if __name__ == "__main__":
    asyncio.run(main())
