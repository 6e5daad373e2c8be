"""Import: how fast a big member's export goes in, and what the first turn after it costs.

    python bench/import.py [--messages 20000,100000] [--database-url URL] [--seed 7]

For each size, an export of that many messages (a member and the companion taking turns,
chat-like sentences from bench.common, one a minute, every message marked in context as a
careless exporter might) is written to a file and read back as `companion import` reads it
(`parse_export`), then restored into a fresh member with `Members.admin_import`, the
function behind `companion import` and the admin pages; messages per second is the size
over the restore's wall time (parsing timed apart). Then the member's first turn runs
against a fake model in this process (`tests.fake_openai.FakeOpenAI`, echo in one
send_message) and its model calls are counted: summary calls there would be the imported
history summarised page by page.

The database: an embedded Postgres in a temporary directory (or a fresh schema on
--database-url), migrated, used as companion_app as the product uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

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
from bench.load import echo_brain
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.members.portability import parse_export
from core.members.service import Members
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.runtime.engine import Engine
from tests.fake_openai import FakeOpenAI, is_summary_request

START = datetime(2023, 1, 1, tzinfo=UTC)


def export_of(count: int, rng: random.Random) -> dict:
    messages = [
        {
            "role": "user" if n % 2 == 0 else "assistant",
            "content": chat_line(rng),
            "created_at": (START + timedelta(minutes=n)).isoformat(),
            "in_context": True,
        }
        for n in range(count)
    ]
    return {
        "format": "companion-export",
        "version": 1,
        "display_name": "Bench",
        "blocks": [
            {"label": "persona", "value": "A warm companion."},
            {"label": "human", "value": "Likes gardening."},
        ],
        "messages": messages,
        "passages": [],
    }


async def one_size(db, count: int, rng: random.Random, fake: FakeOpenAI) -> list[object]:
    sessions = async_sessionmaker(db.engine, expire_on_commit=False)
    config = EngineConfig(rate_limit=None)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(export_of(count, rng), file)
        file.flush()
        started = time.perf_counter()
        export = parse_export(json.loads(await asyncio.to_thread(Path(file.name).read_text)))
        parsed = time.perf_counter() - started
    members = Members(sessions, config, lambda: datetime.now(UTC))
    shown: list[float] = []
    started = time.perf_counter()
    await members.admin_import(
        "bench", "ops", f"m{count}", export, progress=lambda d, t: shown.append(d)
    )
    restored = time.perf_counter() - started
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="b", max_retries=0) as client:
        engine = Engine(sessions, Mind(OpenAIChat(client, "fake"), TokenCounter(), config))
        scope = await engine.agent("bench", f"m{count}")
        before = len(fake.requests)
        started = time.perf_counter()
        await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "Hello again!"))
        turn = time.perf_counter() - started
        await engine.aclose()
    asked = fake.requests[before:]
    summaries = sum(1 for body in asked if is_summary_request(body))
    return [
        f"{count:,}",
        f"{parsed:.1f}",
        f"{restored:.1f}",
        f"{count / restored:,.0f}",
        len(shown),
        len(asked),
        summaries,
        f"{turn:.2f}",
    ]


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    sizes = [int(s) for s in args.messages.split(",")]
    async with (
        bench_database(args.database_url) as db,
        FakeOpenAI(echo_brain, embedding_dim=16) as fake,
    ):
        print(
            settings_block(
                "Settings",
                {
                    "database": f"{db.where} ({await server_version(db.engine)})",
                    "machine": machine(),
                    "code": revision(),
                    "export": "member and companion taking turns, chat-like lines, all marked "
                    "in context",
                    "model": "tests.fake_openai.FakeOpenAI, echo in one send_message",
                },
            )
        )
        rows = [await one_size(db, size, rng, fake) for size in sizes]
    print(
        table(
            [
                "messages",
                "parse s",
                "restore s",
                "messages/s",
                "progress lines",
                "first turn calls",
                "of them summaries",
                "first turn s",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", default="20000,100000", help="sizes, comma-separated")
    parser.add_argument("--database-url", help="a Postgres server (default: embedded)")
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(main(parser.parse_args()))
