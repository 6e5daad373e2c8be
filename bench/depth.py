"""Depth: framework time per message with 0, 300 and 1,000 messages in the FIFO queue.

    python bench/depth.py [--depths 0,300,1000] [--messages 40] [--warmup 5]
                          [--context-window 128000]

For each depth, a fresh agent gets that many messages stored in its FIFO queue (through
`AgentStore.append`, as turns store them: a member's line, the agent's send_message call,
its result), then --warmup untimed and --messages timed messages through `Engine.converse`,
one at a time. The window is large enough (128k) that nothing is flushed: every prompt holds
the whole queue.

The model answers at once and in process, two ways:

- `sdk`: the real `openai` client (`core.llm.OpenAIChat`) over an `httpx` MockTransport. The
  transport answers every chat request with one send_message call (and a summary request,
  which has no tools, with one line of text), reporting no `usage`. Everything the client
  does (building and encoding the request, parsing the answer) counts as framework time;
  only the transport's own handling counts as model time.
- `inprocess`: a `ChatModel` that returns the same answer without any client.

Framework time per message = wall time of `converse` minus the model's time; CPU per
message = this process's CPU time (`time.process_time`) for the same span, minus the
model's. Postgres runs in its own process, so its CPU is not in that figure; its round
trips are in the wall time. Each timed message adds three rows to the queue, so a depth is
the queue's size when the timed messages start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
import openai
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
from core.memory.store import AgentStore
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.memory.window import check_window
from core.ports import ChatModel, Completion
from core.runtime.engine import Engine
from core.scope import Scope, enter_scope


@dataclass
class Stopwatch:
    """Wall and CPU seconds spent inside the model, added up."""

    wall: float = 0.0
    cpu: float = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu


def _answer(has_tools: bool, n: int) -> dict[str, Any]:
    if has_tools:
        arguments = json.dumps({"message": "Nice, tell me more."})
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "send_message", "arguments": arguments},
        }
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
    else:
        message = {"role": "assistant", "content": "Summary: they chatted about their week."}
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": "instant",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


class InstantTransport(httpx2.AsyncBaseTransport):
    """An OpenAI chat endpoint inside the process: answers at once, timed."""

    def __init__(self, watch: Stopwatch) -> None:
        self.watch = watch
        self.n = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with self.watch:
            self.n += 1
            body = await request.aread()
            answer = _answer(b'"tools":' in body, self.n)
            return httpx2.Response(200, json=answer)


class TimedModel:
    """A ChatModel whose `complete` time is the model's (for the in-process model)."""

    def __init__(self, model: ChatModel, watch: Stopwatch) -> None:
        self.model, self.watch = model, watch

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        with self.watch:
            return await self.model.complete(*args, **kwargs)


class StepClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> None:
        self.now += timedelta(minutes=3)


@dataclass
class Depth:
    depth: int
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    prompt_messages: int = 0


async def prefill(engine: Engine, scope: Scope, rows: int, rng: random.Random) -> None:
    """`rows` messages in the agent's FIFO queue, stored as turns store them."""
    now = datetime(2025, 12, 1, 9, 0, tzinfo=UTC)
    async with engine.sessions() as session, session.begin():
        await enter_scope(session, scope)
        store = AgentStore(session, scope, engine.mind.config.max_message_tokens)
        for i in range(rows):
            now += timedelta(minutes=1)
            if i % 3 == 0:
                await store.append(now, role="user", content=chat_line(rng))
            elif i % 3 == 1:
                said = chat_line(rng)
                call = {
                    "id": f"call_p{i}",
                    "type": "function",
                    "function": {
                        "name": "send_message",
                        "arguments": json.dumps({"message": said}),
                    },
                }
                await store.append(
                    now, role="assistant", content=None, tool_calls=[call], search_text=said
                )
            else:
                await store.append(now, role="tool", content="Sent.", tool_call_id=f"call_p{i - 1}")


async def run_depth(
    engine: Engine,
    clock: StepClock,
    watch: Stopwatch,
    depth: int,
    args: argparse.Namespace,
    label: str,
) -> Depth:
    rng = random.Random(args.seed + depth)
    scope = await engine.agent(f"depth-{label}-{depth}", "member")
    await prefill(engine, scope, depth, rng)
    result = Depth(depth)
    for i in range(args.warmup + args.messages):
        clock.tick()
        text = chat_line(rng)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        model_wall, model_cpu = watch.wall, watch.cpu
        exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        if not exchange.replies or (exchange.result and exchange.result.error):
            raise SystemExit(f"a message did not reach the model: {exchange.result}")
        if exchange.result and exchange.result.flushes:
            raise SystemExit("the queue was flushed: use a larger --context-window")
        if i >= args.warmup:
            result.wall.append(wall - (watch.wall - model_wall))
            result.cpu.append(cpu - (watch.cpu - model_cpu))
    return result


async def run_mode(db: Database, mode: str, args: argparse.Namespace) -> list[Depth]:
    config = EngineConfig(context_window=args.context_window, rate_limit=None)
    check_window(config)
    watch = Stopwatch()
    sessions = async_sessionmaker(db.engine, expire_on_commit=False)
    clock = StepClock()
    if mode == "sdk":
        http = httpx2.AsyncClient(transport=InstantTransport(watch))
        client = openai.AsyncOpenAI(
            base_url="http://instant.invalid/v1", api_key="bench", http_client=http, max_retries=0
        )
        model: ChatModel = OpenAIChat(client, "instant")
    else:
        client = None
        model = TimedModel(InstantModel(), watch)
    engine = Engine(sessions, Mind(model, TokenCounter(), config), clock)
    try:
        return [await run_depth(engine, clock, watch, d, args, mode) for d in args.depths]
    finally:
        await engine.aclose()
        if client is not None:
            await client.close()


def rows(results: list[Depth], mode: str) -> list[list[object]]:
    base_wall = stats_ms(results[0].wall)["median"]
    base_cpu = stats_ms(results[0].cpu)["median"]
    out: list[list[object]] = []
    for r in results:
        wall, cpu = stats_ms(r.wall), stats_ms(r.cpu)
        out.append(
            [
                f"{mode}, {r.depth} in queue",
                wall["median"],
                wall["p95"],
                f"{wall['median'] / base_wall:.2f}x",
                cpu["median"],
                cpu["p95"],
                f"{cpu['median'] / base_cpu:.2f}x",
            ]
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--depths", default="0,300,1000", help="queue sizes, comma-separated")
    parser.add_argument("--messages", type=int, default=40, help="timed messages per depth")
    parser.add_argument("--warmup", type=int, default=5, help="untimed messages first")
    parser.add_argument("--context-window", type=int, default=128_000)
    parser.add_argument("--modes", default="sdk,inprocess", help="sdk and/or inprocess")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    args.depths = [int(d) for d in args.depths.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    async with bench_database(args.database_url, pool_size=4) as db:
        print(
            settings_block(
                "Settings",
                {
                    "database": f"{db.where} ({await server_version(db.engine)})",
                    "machine": machine(),
                    "code": revision(),
                    "engine config": f"context_window={args.context_window}, rate_limit=None",
                    "messages": f"{args.messages} timed after {args.warmup} warm-up per depth, "
                    "one at a time, 3 rows each",
                    "depths": ", ".join(map(str, args.depths)) + " messages in the FIFO queue",
                    "models": ", ".join(modes),
                },
            )
        )
        results = {mode: await run_mode(db, mode, args) for mode in modes}
    print("\nFramework time per message (converse minus the model), ms")
    print(
        table(
            ["run", "wall median", "wall p95", "vs 0", "CPU median", "CPU p95", "vs 0"],
            [row for mode in modes for row in rows(results[mode], mode)],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
