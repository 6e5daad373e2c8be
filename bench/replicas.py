"""Replicas: `companion run` processes in Slack HTTP mode behind a round-robin proxy, one
Postgres, one of them killed (SIGKILL) a third of the way through and started again.

    python bench/replicas.py [--replicas 3] [--members 100] [--each 10] [--no-kill]

The long form of tests/test_replicas.py (same code: tests/replicas.py). Each member sends
--each messages in a row, the next one once the previous was acknowledged (HTTP 200), as
Slack does; all members at once. The model is tests.fake_openai.FakeOpenAI on loopback (it
answers at once). Prints what members saw: missing, duplicated and out of order must be 0 (a
post the killed process made before it could mark it sent is found in the channel by
whoever finishes its work, not posted again). Also the events per second from the first post to
the last answer, and the growth of the database per message. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, revision, settings_block  # noqa: E402
from bot.database import embedded_postgres, make_engine  # noqa: E402
from tests.conftest import cli_env  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.fake_slack import FakeSlack  # noqa: E402
from tests.replicas import (  # noqa: E402
    Replicas,
    RoundRobin,
    members,
    outcome,
    until_acknowledged,
    wait_for_answers,
)
from tests.test_run import free_port  # noqa: E402


async def run(args: argparse.Namespace) -> int:
    people = members(args.members, args.each)
    total = args.members * args.each
    with tempfile.TemporaryDirectory(prefix="companion-bench-") as data_dir:
        async with (
            embedded_postgres(Path(data_dir)) as url,
            FakeOpenAI(embedding_dim=16) as fake,
            FakeSlack() as api,
        ):
            env = cli_env(fake, url)
            replicas = Replicas(env, api, [free_port() for _ in range(args.replicas)])
            await replicas.start(replicas.ports[0])  # migrates once
            await asyncio.gather(*(replicas.start(p) for p in replicas.ports[1:]))
            empty = await database_size(url)
            started = time.perf_counter()
            try:
                async with RoundRobin(replicas.ports) as proxy, aiohttp.ClientSession() as http:
                    going = asyncio.Event()
                    going.set()
                    url_ = f"{proxy.url}/slack/events"
                    talking = [asyncio.create_task(m.talk(http, url_, going)) for m in people]
                    if not args.no_kill:
                        victim = replicas.ports[-1]
                        await until_acknowledged(people, total // 3, talking, 600)
                        replicas.kill(victim)
                        await until_acknowledged(people, total // 2, talking, 600)
                        await replicas.start(victim)
                    await asyncio.gather(*talking)
                answered = await wait_for_answers(api, people, seconds=600)
                elapsed = time.perf_counter() - started - 2  # wait_for_answers' 2 s of quiet
                result = outcome(api, people, replicas.killed)
                size = await database_size(url) - empty
                memory = [resident_mb(proc.pid) for proc in replicas.procs.values()]
            finally:
                await replicas.stop_all()
    print(
        settings_block(
            "bench/replicas.py",
            {
                "replicas": args.replicas,
                "members": args.members,
                "messages each": args.each,
                "kill": "no" if args.no_kill else "one replica, a third of the way",
                "code": revision(),
                "machine": machine(),
            },
        )
    )
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    print(f"{'all answered':>22}: {answered}")
    print(f"{'events/s':>22}: {total / elapsed:.1f} ({elapsed:.1f} s)")
    print(
        f"{'database growth':>22}: {size / 1e6:.2f} MB, {size / total:.0f} bytes per message "
        "(its answer, events, outbox and indexes included)"
    )
    print(f"{'resident memory':>22}: " + ", ".join(f"{mb:.0f} MB" for mb in memory))
    errors = [
        json.loads(line)
        for lines in replicas.logs.values()
        for line in lines
        if b'"level": "ERROR"' in line
    ]
    print(f"{'errors logged':>22}: {len(errors)}")
    for error in errors:  # the message, and the exception's last line
        last = (error.get("exc") or "").strip().splitlines()[-1:] or [""]
        print(f"    {error['message']}: {last[0][:300]}")
    bad = result["missing"] or result["duplicated"] or result["members out of order"]
    return 1 if bad or not answered else 0


def resident_mb(pid: int) -> float:
    """A live process's resident memory (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def database_size(url: str) -> int:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(text("SELECT pg_database_size(current_database())")))
    finally:
        await engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--each", type=int, default=10, help="messages per member")
    parser.add_argument("--no-kill", action="store_true", help="no replica is killed")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
