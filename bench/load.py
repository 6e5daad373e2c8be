"""Load: events per second and latency per message, many agents, several processes, one Postgres.

    python bench/load.py [--processes 4] [--concurrency 16] [--agents 1000] [--tenants 20]
                         [--messages 5000] [--hot 50] [--model http|inprocess]

The parent starts an embedded Postgres in a temporary directory (or makes a throwaway schema
on --database-url), migrates it once, creates the agents (members spread evenly over the
tenants) and plans the messages: each agent gets messages/agents of them (1-3 generated
English sentences, tagged with the agent and a number). The plan is one list: the messages of
--hot agents come in bursts (all of one agent's messages back to back), the others are
shuffled. Message i of the list goes to process i % processes, so a hot agent's burst lands
on different processes at about the same moment and they queue on its row lock.

Each worker process (multiprocessing, spawn) opens its own SQLAlchemy engine on the shared
database (pool = --concurrency) and its own `Engine`, warms up with three messages to an agent of
its own, waits for the others, then runs --concurrency senders. A sender takes the next
message of its process's list and does what `Engine.converse(scope, event)` does, one step at
a time so that the moment the event was stored is known: `submit` (stored), `drain` (turns
under the agent's row lock, one at a time, oldest first) and `take_replies(event_id)`. The
latency of a message is from before submit to its replies in hand (time.perf_counter;
CLOCK_MONOTONIC on Linux, so the workers' clocks agree). Events per second = messages / (last
reply - first submit, over all processes).

The model answers at once. --model http (default): the real `openai` client against
`tests.fake_openai.FakeOpenAI` started inside each worker on loopback, with a brain that echoes
the message in one send_message call and reports no `usage` (so the fake does not tokenize
every prompt; the engine then uses its own estimate). The fake shares the worker's CPU and
event loop. --model inprocess: an in-process `core.ports.ChatModel` with the same echo, no
HTTP at all.

Engine settings: `EngineConfig()` defaults except `rate_limit=None` (the per-member limit
would turn a burst away without a model call). The engine clock is the real clock.

Checks (printed; exit status 1 when one fails): every message got exactly one reply, the echo
of its own text, from `take_replies` of its own event; in the database every planned event is
`done` with exactly one outbox row holding that reply; and per agent the replies came in
submission order: whenever one message's event was stored (its submit returned) before another
message to the same agent was submitted, the first one's reply comes first (outbox ids are
taken inside each turn, and one agent's turns run one at a time). Two messages submitted at
the same moment have no order: their event ids are taken in one order and may commit in the
other, and the one committed first is handled first; the script counts such pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import shlex
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

from bench.common import (
    InstantModel,
    bench_database,
    chat_line,
    machine,
    revision,
    server_version,
    table,
)
from bot.database import make_engine
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.models import Event, Reply, Tenant
from core.runtime.engine import Engine
from core.scope import Scope

CONFIG = EngineConfig(rate_limit=None)
TENANT_PREFIX = "bench-load-"
MAX_CONNECTIONS = 90  # the embedded server allows 100; leave room for the parent


@dataclass(frozen=True)
class Planned:
    n: int  # position in the plan
    agent: int  # index into the agent list
    tenant_id: int
    agent_id: int
    text: str

    @property
    def reply(self) -> str:
        return f"You said: {self.text}"


@dataclass(frozen=True)
class Done:
    n: int
    event_id: int
    started: float  # perf_counter before submit
    stored: float  # perf_counter when submit returned (the event committed)
    latency: float  # seconds from `started` to the replies in hand
    replies: tuple[str, ...]
    here: bool  # this sender's own drain handled it (not queued behind another's)


# ---------------------------------------------------------------- the model


def echo_brain(body: dict[str, Any]) -> dict[str, Any]:
    from tests.fake_openai import is_summary_request, last_user_text, say, summary_of

    answer = (
        summary_of(body) if is_summary_request(body) else say(f"You said: {last_user_text(body)}")
    )
    answer["usage"] = None  # keeps FakeOpenAI from counting the prompt with tiktoken
    return answer


# ---------------------------------------------------------------- a worker process


def worker(
    index: int, settings: dict[str, Any], plan: list[Planned], ready: Any, go: Any, out: Any
):
    asyncio.run(_worker(index, settings, plan, ready, go, out))


async def _worker(
    index: int, settings: dict[str, Any], plan: list[Planned], ready: Any, go: Any, out: Any
) -> None:
    import openai

    from core.llm import OpenAIChat
    from tests.fake_openai import FakeOpenAI

    concurrency = settings["concurrency"]
    db = make_engine(settings["url"], settings["schema"], pool_size=concurrency)
    sessions = async_sessionmaker(db, expire_on_commit=False)
    fake = client = None
    if settings["model"] == "http":
        fake = FakeOpenAI(echo_brain, embedding_dim=16)
        await fake.start()
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0)
        model: Any = OpenAIChat(client, "fake")
    else:
        model = InstantModel()
    engine = Engine(sessions, Mind(model, TokenCounter(), CONFIG))
    try:
        warm = await engine.agent(f"{TENANT_PREFIX}warmup", f"worker-{index}")
        for _ in range(3):
            await engine.converse(warm, InboundEvent(EventKind.USER_MESSAGE, "Hello there."))
        calls_before = len(fake.requests) if fake else model.n
        ready.put(index)
        cpu = time.process_time()
        await asyncio.to_thread(go.wait)

        queue = list(reversed(plan))
        done: list[Done] = []

        async def sender() -> None:
            while queue:
                item = queue.pop()
                scope = Scope(item.tenant_id, item.agent_id)
                event = InboundEvent(EventKind.USER_MESSAGE, item.text, f"load:{item.n}")
                # Engine.converse, step by step, to note when the event was stored.
                started = time.perf_counter()
                event_id = await engine.submit(scope, event)
                stored = time.perf_counter()
                results = await engine.drain(scope)
                replies = await engine.outbox.take_replies(event_id)
                latency = time.perf_counter() - started
                here = any(r.event_id == event_id for r in results)
                done.append(Done(item.n, event_id, started, stored, latency, tuple(replies), here))

        await asyncio.gather(*(sender() for _ in range(concurrency)))
        calls = (len(fake.requests) if fake else model.n) - calls_before
        out.put((index, done, calls, time.process_time() - cpu))
    finally:
        await engine.aclose()
        if client:
            await client.close()
        if fake:
            await fake.stop()
        await db.dispose()


# ---------------------------------------------------------------- the parent


async def make_agents(engine: Engine, tenants: int, agents: int) -> list[Scope]:
    names = [(f"{TENANT_PREFIX}{i % tenants:02d}", f"member-{i:05d}") for i in range(agents)]
    scopes: list[Scope | None] = [None] * agents
    for i in range(min(tenants, agents)):  # each tenant's first member creates the tenant
        scopes[i] = await engine.agent(*names[i])
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with gate:
            scopes[i] = await engine.agent(*names[i])

    await asyncio.gather(*(one(i) for i in range(tenants, agents)))
    return [s for s in scopes if s is not None]


def make_plan(
    scopes: list[Scope], messages: int, hot: int, seed: int
) -> tuple[list[Planned], set[int]]:
    """The messages in sending order, and the agents whose messages come in bursts."""
    rng = random.Random(seed)
    per_agent = [messages // len(scopes)] * len(scopes)
    for i in rng.sample(range(len(scopes)), messages % len(scopes)):
        per_agent[i] += 1
    order = list(range(len(scopes)))
    rng.shuffle(order)
    hot_agents, cool = order[:hot], order[hot:]
    loose = [(a, k) for a in cool for k in range(per_agent[a])]
    rng.shuffle(loose)
    # A hot agent's messages go in back to back, at a random place in the list.
    units: list[list[tuple[int, int]]] = [[item] for item in loose]
    for a in hot_agents:
        units.insert(rng.randrange(len(units) + 1), [(a, k) for k in range(per_agent[a])])
    flat = [item for unit in units for item in unit]
    plan = [
        Planned(
            n,
            a,
            scopes[a].tenant_id,
            scopes[a].agent_id,
            f"[agent {a} message {k}] {chat_line(rng)}",
        )
        for n, (a, k) in enumerate(flat)
    ]
    return plan, set(hot_agents)


def percentile(values: Sequence[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def latency_row(label: str, seconds: Sequence[float], wall: float) -> list[object]:
    ms = [s * 1000 for s in seconds]
    return [
        label,
        len(ms),
        f"{len(ms) / wall:.1f}",
        percentile(ms, 50),
        percentile(ms, 95),
        percentile(ms, 99),
        max(ms),
    ]


async def check(
    sessions: async_sessionmaker, plan: list[Planned], done: dict[int, Done]
) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for everything the run promises."""
    results: list[tuple[str, bool, str]] = []
    missing = [p.n for p in plan if p.n not in done]
    wrong = [p.n for p in plan if p.n in done and done[p.n].replies != (p.reply,)]
    results.append(
        (
            "every message got exactly one reply, its own echo",
            not missing and not wrong,
            f"{len(plan) - len(missing) - len(wrong)}/{len(plan)} "
            f"(none: {len(missing)}, wrong: {len(wrong)})",
        )
    )
    async with sessions() as session:
        events = (
            await session.execute(
                select(Event.id, Event.agent_id, Event.status, Event.dedup_key)
                .join(Tenant, Tenant.id == Event.tenant_id)
                .where(Tenant.key.like(f"{TENANT_PREFIX}%"), Event.dedup_key.like("load:%"))
            )
        ).all()
        outbox = (
            await session.execute(
                select(Reply.id, Reply.event_id, Reply.text)
                .join(Event, Event.id == Reply.event_id)
                .where(Event.dedup_key.like("load:%"))
            )
        ).all()
    by_n = {p.n: p for p in plan}
    statuses = Counter(status for _, _, status, _ in events)
    results.append(
        (
            "every planned event stored once and done",
            len(events) == len(plan) and statuses == Counter(done=len(plan)),
            f"{len(events)} events, statuses {dict(statuses)}",
        )
    )
    rows_per_event: dict[int, list[str]] = defaultdict(list)
    for _, event_id, text in outbox:
        rows_per_event[event_id].append(text)
    key_of = {event_id: int(key.split(":")[1]) for event_id, _, _, key in events}
    bad = [
        e for e in key_of if rows_per_event.get(e) != [by_n[key_of[e]].reply]
    ]  # one row, the right text
    results.append(
        (
            "exactly one outbox row per event, with its reply",
            not bad and len(outbox) == len(plan),
            f"{len(outbox)} rows; {len(bad)} events without exactly their one reply",
        )
    )
    # Submission order: when one message's event was stored (its submit returned) before
    # another message to the same agent was submitted, its reply must come first. (Messages
    # submitted at the same moment have no order; their event ids are taken in one order and
    # may commit in the other.) Reply order is outbox id order: taken inside each turn, and
    # the turns of one agent run one at a time.
    agent_of = {event_id: agent_id for event_id, agent_id, _, _ in events}
    reply_at = {event_id: row_id for row_id, event_id, _ in outbox}
    mine: dict[int, list[Done]] = defaultdict(list)
    for d in done.values():
        if d.event_id in agent_of and d.event_id in reply_at:
            mine[agent_of[d.event_id]].append(d)
    pairs = inverted = concurrent = swapped = 0
    for items in mine.values():
        for x in items:
            for y in items:
                if x.stored < y.started:
                    pairs += 1
                    inverted += reply_at[x.event_id] > reply_at[y.event_id]
                elif x.event_id < y.event_id and x.started < y.stored:
                    concurrent += 1  # overlapping submits, each way round counted once
                    swapped += reply_at[x.event_id] > reply_at[y.event_id]
    results.append(
        (
            "per agent, replies in submission order",
            not inverted and pairs > 0,
            f"{pairs} ordered pairs of messages to one agent, {inverted} answered out of "
            f"order; {concurrent} pairs submitted at the same moment, {swapped} of them "
            "answered against event-id order",
        )
    )
    return results


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16, help="senders per process")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--messages", type=int, default=5000, help="in total")
    parser.add_argument("--hot", type=int, default=50, help="agents whose messages come in a burst")
    parser.add_argument("--model", choices=("http", "inprocess"), default="http")
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.processes * args.concurrency > MAX_CONNECTIONS:
        parser.error(f"processes x concurrency must stay under {MAX_CONNECTIONS} connections")

    command = shlex.join(["python", "bench/load.py", *sys.argv[1:]])
    async with bench_database(args.database_url, pool_size=16) as db:
        sessions = async_sessionmaker(db.engine, expire_on_commit=False)
        parent = Engine(sessions, Mind(InstantModel(), TokenCounter(), CONFIG))
        started = time.perf_counter()
        scopes = await make_agents(parent, args.tenants, args.agents)
        plan, hot_agents = make_plan(scopes, args.messages, args.hot, args.seed)
        setup = time.perf_counter() - started
        per_agent = Counter(p.agent for p in plan)
        model = (
            "real openai client -> tests.fake_openai.FakeOpenAI in each worker (loopback HTTP), "
            "echo brain, no usage reported"
            if args.model == "http"
            else "an in-process ChatModel with the same echo (no HTTP)"
        )
        print(f"Command: {command}")
        print("Settings")
        for key, value in {
            "database": f"{db.where} ({await server_version(db.engine)})",
            "machine": machine(),
            "code": revision(),
            "processes": f"{args.processes} workers (multiprocessing, spawn), "
            f"{args.concurrency} senders each, {args.processes * args.concurrency} at once",
            "agents": f"{len(scopes)} over {args.tenants} tenants (created in {setup:.1f} s)",
            "messages": f"{len(plan)}: {min(per_agent.values())}-{max(per_agent.values())} "
            f"per agent; {args.hot} agents' messages in bursts, the rest shuffled (seed "
            f"{args.seed}); message i to process i % {args.processes}",
            "model": model,
            "engine": "EngineConfig() defaults, rate_limit=None; submit, drain, take_replies "
            "per message (what Engine.converse does)",
            "latency": "submit -> replies taken, time.perf_counter",
        }.items():
            print(f"  {key.ljust(10)}  {value}")
        sys.stdout.flush()

        settings = {
            "url": db.url,
            "schema": db.schema,
            "concurrency": args.concurrency,
            "model": args.model,
        }
        ctx = mp.get_context("spawn")
        ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        shares = [plan[i :: args.processes] for i in range(args.processes)]
        procs = [
            ctx.Process(target=worker, args=(i, settings, shares[i], ready, go, out))
            for i in range(args.processes)
        ]
        for proc in procs:
            proc.start()
        try:
            for _ in procs:
                await asyncio.to_thread(ready.get, True, 300)
            go.set()
            reports = [await asyncio.to_thread(out.get, True, 3600) for _ in procs]
        finally:
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
        done = {d.n: d for _, items, _, _ in reports for d in items}
        first = min(d.started for d in done.values())
        last = max(d.started + d.latency for d in done.values())
        wall = last - first
        calls = sum(c for _, _, c, _ in reports)
        cpu = sum(c for _, _, _, c in reports)

        rows = [latency_row("all processes", [d.latency for d in done.values()], wall)]
        for index, items, _, _ in sorted(reports, key=lambda r: r[0]):
            rows.append(latency_row(f"  process {index}", [d.latency for d in items], wall))
        print(f"\nResults ({wall:.1f} s from the first submit to the last reply)")
        print(table(["", "messages", "events/s", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows))
        queued = sum(not d.here for d in done.values())
        print(
            f"  model calls per message: {calls / len(done):.2f}; worker CPU per message "
            f"(engine{' + fake' if args.model == 'http' else ''}; Postgres not included): "
            f"{cpu * 1000 / len(done):.1f} ms\n"
            f"  handled by another sender's drain (queued behind a turn of the same agent): "
            f"{queued}"
        )
        hot_latency = [done[p.n].latency for p in plan if p.agent in hot_agents and p.n in done]
        if len(hot_latency) > 1:
            print(
                f"  latency of hot agents' messages: p50 {percentile(hot_latency, 50) * 1000:.1f}"
                f" ms, p95 {percentile(hot_latency, 95) * 1000:.1f} ms ({len(hot_latency)})"
            )

        print("\nChecks")
        results = await check(sessions, plan, done)
        for name, passed, detail in results:
            print(f"  [{'ok' if passed else 'FAILED'}] {name}: {detail}")
        summary = {
            "events_per_second": round(len(done) / wall, 1),
            "p50_ms": round(percentile([d.latency for d in done.values()], 50) * 1000, 1),
            "p95_ms": round(percentile([d.latency for d in done.values()], 95) * 1000, 1),
            "p99_ms": round(percentile([d.latency for d in done.values()], 99) * 1000, 1),
        }
        print(f"\nSummary: {json.dumps(summary)}")
        return 0 if all(passed for _, passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
