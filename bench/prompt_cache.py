"""Prompt cache: how much of each model call repeats the previous call's prefix, and prompt size.

    python bench/prompt_cache.py [--messages 200] [--context-window 8192] [--edits 4]

One agent gets --messages member messages (1-3 generated sentences each, `bench.common`),
one at a time, through `Engine.converse` and the real `openai` client against
`tests.fake_openai.FakeOpenAI` on loopback. The fake's brain answers each message with one
send_message call; --edits of the messages, spread evenly, are `remember ...`, which the brain
answers with a `core_memory_append` first (a block edit), then a send_message.

Each chat request is turned into one token sequence in the order a provider caches it (the
function schemas, then each message: role, text, calls; `tests.fake_openai.prompt_tokens`).
For two consecutive chat calls of the agent, the cacheable share is the length of their
common prefix divided by the length of the second. Pairs are reported in three groups:
between flushes (neither a summary call nor a block edit between them), at a
flush (a summary call came between them) and at a block edit (the call right after a
`core_memory_append`: the system message holds the new block).

Also: the first prompt of a fresh agent (`tests.fake_openai.count_prompt`, the count the fake
reports as `usage.prompt_tokens`) and the growth per plain message: how many tokens the next
call's prompt has more than the previous one's between flushes, beside how many of them are
the two texts themselves (the member's new message and the reply to the one before).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from sqlalchemy.ext.asyncio import async_sessionmaker

from bench.common import (
    bench_database,
    chat_line,
    machine,
    revision,
    server_version,
    settings_block,
    table,
)
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.runtime.engine import Engine
from tests.fake_openai import (
    ENC,
    FakeOpenAI,
    calls,
    common_prefix,
    count_prompt,
    is_summary_request,
    last,
    last_user_text,
    prompt_tokens,
    say,
    summary_of,
    tool_call,
)


def brain(body: dict[str, Any]) -> dict[str, Any]:
    """One send_message per message; `remember ...` edits working context first."""
    if is_summary_request(body):
        return summary_of(body)
    if last(body).get("role") == "tool":  # the block edit ran: now answer
        return say("Noted.")
    text = last_user_text(body)
    if text.startswith("remember "):
        return calls(tool_call("core_memory_append", label="human", content=text[9:]))
    return say(f"You said: {text[:60]}")


class StepClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> None:
        self.now += timedelta(minutes=3)


GROUPS = ("between flushes", "at a flush", "at a block edit")


def classify(requests: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Cacheable shares of consecutive chat calls, by what came between them."""
    groups: dict[str, list[float]] = {name: [] for name in GROUPS}
    previous: dict[str, Any] | None = None
    flushed = False
    for body in requests:
        if is_summary_request(body):
            flushed = True
            continue
        if previous is not None:
            tokens = prompt_tokens(body)
            share = common_prefix(prompt_tokens(previous), tokens) / len(tokens)
            if flushed:
                groups["at a flush"].append(share)
            elif last(body).get("role") == "tool":  # the step after core_memory_append
                groups["at a block edit"].append(share)
            else:
                groups["between flushes"].append(share)
        previous, flushed = body, False
    return groups


def growth(requests: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Per plain message between flushes: (tokens the prompt grew, tokens of the two texts)."""
    grew, texts = [], []
    chats: list[dict[str, Any] | None] = []
    for body in requests:  # None marks a summary call: no pair across it
        chats.append(None if is_summary_request(body) else body)
    for previous, body in zip(chats, chats[1:], strict=False):
        if previous is None or body is None:
            continue
        answered, new = last_user_text(previous), last_user_text(body)
        if answered.startswith("remember ") or new.startswith("remember "):
            continue
        grew.append(count_prompt(body) - count_prompt(previous))
        reply = f"You said: {answered[:60]}"  # what the brain sent for the previous message
        texts.append(len(ENC.encode(new)) + len(ENC.encode(reply)))
    return grew, texts


def quantiles(values: list[float]) -> list[str]:
    if not values:
        return ["-", "-", "-", "0"]
    ordered = sorted(values)
    return [
        f"{statistics.median(ordered):.3f}",
        f"{ordered[len(ordered) // 10]:.3f}",
        f"{ordered[0]:.3f}",
        str(len(ordered)),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="use this Postgres (a throwaway schema in it)")
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--context-window", type=int, default=8192)
    parser.add_argument("--edits", type=int, default=4, help="messages that edit a block")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    texts = [chat_line(rng) for _ in range(args.messages)]
    for k in range(args.edits):
        texts[(k + 1) * args.messages // (args.edits + 1)] = f"remember {chat_line(rng)}"
    config = EngineConfig(context_window=args.context_window, rate_limit=None)
    async with bench_database(args.database_url, pool_size=4) as db:
        version = await server_version(db.engine)
        async with (
            FakeOpenAI(brain, embedding_dim=16) as fake,
            openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0) as client,
        ):
            sessions = async_sessionmaker(db.engine, expire_on_commit=False)
            clock = StepClock()
            engine = Engine(
                sessions, Mind(OpenAIChat(client, "fake"), TokenCounter(), config), clock
            )
            scope = await engine.agent("cache", "member")
            for text in texts:
                clock.tick()
                await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
            await engine.aclose()
            requests = list(fake.requests)
    print(
        settings_block(
            "Settings",
            {
                "database": f"{db.where} ({version})",
                "machine": machine(),
                "code": revision(),
                "engine config": f"context_window={args.context_window}, rate_limit=None",
                "messages": f"{args.messages} to one agent, {args.edits} of them block edits",
                "model": "real openai client -> tests.fake_openai.FakeOpenAI (loopback)",
            },
        )
    )
    chats = [b for b in requests if not is_summary_request(b)]
    summaries = len(requests) - len(chats)
    print(f"\nchat calls {len(chats)}, summary calls (flushes) {summaries}")
    print("\nCacheable share of each chat call (common prefix with the agent's previous call)")
    groups = classify(requests)
    print(
        table(
            ["pairs", "median", "p10", "min", "n"],
            [[name, *quantiles(values)] for name, values in groups.items()],
        )
    )
    grew, text_tokens = growth(requests)
    first = count_prompt(chats[0])
    print("\nPrompt size (tests.fake_openai.count_prompt, what the fake reports as usage)")
    print(
        table(
            ["measure", "tokens"],
            [
                ["first prompt of a fresh agent", first],
                ["growth per plain message, median", statistics.median(grew)],
                [
                    "  of which the two texts, median",
                    statistics.median(text_tokens),
                ],
                [
                    "  framing (growth minus the texts), median",
                    statistics.median(g - t for g, t in zip(grew, text_tokens, strict=True)),
                ],
                ["plain messages measured", len(grew)],
            ],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
