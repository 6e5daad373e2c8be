"""Fan-out: many members write at the same moment; how soon is the last one answered?

    python bench/fanout.py [--members 100] [--latency 2] [--concurrency 64]
                           [--embedder endpoint|local|none] [--py-spy FILE]

What a community's companion meets after an announcement: --members members each send one
Slack DM at the same instant to one `companion run` (Slack HTTP mode, its own process, on an
embedded Postgres this script starts in a temporary directory), while the model takes
--latency seconds per call. The model is `tests.fake_openai.FakeOpenAI` in this process,
answering each member with one send_message call that echoes the message; Slack's Web API
is `tests.fake_slack.FakeSlack`. Every member first gets one untimed message with an instant
model (their member, agent and Slack profile are created then).

Printed: time from the first POST to the last reply (`chat.postMessage`), acknowledgements,
the most model calls in flight at once (counted by the fake) and their mean over the run,
the server's peak RSS, the most Postgres connections the server had open (sampled from
pg_stat_activity every 50 ms) and its CPU. Checked: every member answered exactly once,
with a reply to their own message.

The server's settings: COMPANION_MODEL_CONCURRENCY=--concurrency (calls in flight at
most), its pool of 10 connections (10 more when busy), rate limits off, logs at WARNING;
embeddings from the fake's endpoint unless --embedder says `local` (the local model in the
server's process) or `none`. --py-spy FILE samples the server from the burst to the last
reply (`bench/profile.py FILE` sums it); --count-sql FILE counts the server's SQL statements
and transactions per message.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from sqlalchemy import text

from bench.common import (
    Spy,
    machine,
    revision,
    settings_block,
    sql_counts,
    start_sql_count,
    stats_ms,
    sticks,
    table,
    yardstick,
)
from bench.load import echo_brain
from bench.slack_http import (
    EMBEDDER_TEXT,
    Replies,
    ack_buckets,
    ack_rows,
    companion_env,
    companion_run,
    cpu_seconds,
    envelope,
    free_port,
    served_database,
    server_options,
    wait_listening,
)
from bot.database import make_engine
from tests.fake_openai import FakeOpenAI
from tests.fake_slack import FakeSlack, signed

SECRET = "bench-signing-secret"


class SlowModel:
    """The echo brain, taking `latency` seconds per call once `slow` is set; counts the calls
    in flight."""

    def __init__(self) -> None:
        self.latency = 0.0
        self.in_flight = 0
        self.most = 0
        self.samples: list[int] = []

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            return echo_brain(body)
        finally:
            self.in_flight -= 1


def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def post(http: aiohttp.ClientSession, url: str, user: str, n: int) -> float:
    """POST one DM tagged [m<n>]; returns when it was acknowledged."""
    body = envelope(user, f"Hi everyone, this is me [m{n}] saying hello.", n)
    async with http.post(url, data=body, headers=signed(body, SECRET)) as response:
        if response.status != 200:
            raise SystemExit(f"/slack/events answered {response.status}: {await response.text()}")
    return time.perf_counter()


async def run(args: argparse.Namespace, data_dir: Path) -> None:
    async with served_database(data_dir, args.embedder) as (url, admin_url):
        watcher = make_engine(admin_url, pool_size=1)
        model, replies, port = SlowModel(), Replies(), free_port()
        args.ops_port = free_port()
        async with FakeOpenAI(model, embedding_dim=16) as fake, FakeSlack() as api:
            api.on_call = replies.on_call
            members = [f"U{a:05d}" for a in range(args.members)]
            for user in members:
                api.add_user(user)
            env = companion_env(url, fake, api, port, args)
            env["COMPANION_MODEL_CONCURRENCY"] = str(args.concurrency)
            try:
                async with companion_run(env) as proc:
                    await measure(args, proc, port, replies, model, api, members, watcher)
            finally:
                await watcher.dispose()
            if args.count_sql:
                rows = sql_counts(args.count_sql, args.members)
                print(table(["SQL of the timed run (companion run)", ""], rows))


async def connections(watcher: Any) -> int:
    async with watcher.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'companion_app'"
        return int(await conn.scalar(text(query)) or 0)


async def measure(
    args: argparse.Namespace,
    proc: Any,
    port: int,
    replies: Replies,
    model: SlowModel,
    api: FakeSlack,
    members: list[str],
    watcher: Any,
) -> None:
    url = f"http://127.0.0.1:{port}/slack/events"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await wait_listening(http, port, proc)
        warm = 10_000_000
        for start in range(0, len(members), 50):  # untimed: members, agents, profiles
            batch = list(enumerate(members[start : start + 50], start))
            waits = [replies.expect(f"m{warm + i}") for i, _ in batch]
            await asyncio.gather(*(post(http, url, user, warm + i) for i, user in batch))
            await asyncio.wait_for(asyncio.gather(*waits), 300)
        await asyncio.sleep(1)
        posted_before = len(api.called("chat.postMessage"))
        model.latency, model.most = args.latency, 0
        answered = {n: replies.expect(f"m{n}") for n in range(len(members))}
        peak_connections, sampling = 0, True

        async def sample() -> None:
            nonlocal peak_connections
            while sampling:
                peak_connections = max(peak_connections, await connections(watcher))
                model.samples.append(model.in_flight)
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        start_sql_count(proc.pid, args.count_sql)
        stick = [yardstick()]
        acks_before = await ack_buckets(http, args.ops_port)
        with Spy(proc.pid, args.py_spy):
            cpu0, started = cpu_seconds(proc.pid), time.perf_counter()
            acks = await asyncio.gather(*(post(http, url, u, n) for n, u in enumerate(members)))
            times = await asyncio.wait_for(asyncio.gather(*answered.values()), 600)
            last = max(times)
            cpu = cpu_seconds(proc.pid) - cpu0
        server_acks = ack_rows(acks_before, await ack_buckets(http, args.ops_port))
        stick.append(yardstick())
        await asyncio.sleep(2)  # anything sent twice would arrive by now
        sampling = False
        await sampler
    posts = api.called("chat.postMessage")[posted_before:]
    per_member: dict[str, int] = {}
    for call in posts:
        per_member[call["channel"]] = per_member.get(call["channel"], 0) + 1
    twice = sum(1 for count in per_member.values() if count > 1)
    wrong = sum(1 for n, user in enumerate(members) if f"[m{n}]" not in _reply_to(posts, user))
    busy = [s for s in model.samples if s]
    print(
        settings_block(
            "Settings",
            {
                "machine": machine(),
                "code": revision(),
                "server": "companion run (Slack HTTP mode), its own process, embedded Postgres",
                "members": f"{len(members)}, one DM each, all POSTed at once",
                "model": f"FakeOpenAI echo in one send_message, {args.latency:g} s per call",
                "embedder": EMBEDDER_TEXT[args.embedder],
                "COMPANION_MODEL_CONCURRENCY": args.concurrency,
            },
        )
    )
    ack = stats_ms([a - started for a in acks])
    late = sum(1 for a in acks if a - started > 3)
    latency = stats_ms([t - started for t in times])
    print(
        table(
            ["measure", "value"],
            [
                ["last reply after the first POST, s", f"{last - started:.2f}"],
                [
                    "reply p50 / p95, s",
                    f"{latency['median'] / 1000:.2f} / {latency['p95'] / 1000:.2f}",
                ],
                [
                    "acknowledgement p50 / p95 / max, ms",
                    f"{ack['median']:.0f} / {ack['p95']:.0f} / {ack['max']:.0f}",
                ],
                ["acknowledgements after 3 s (Slack retries them)", late],
                *server_acks,
                ["CPU yardstick at start / end, ms (bench.common.yardstick)", sticks(stick)],
                ["model calls in flight: most", model.most],
                ["model calls in flight: mean while any", f"{sum(busy) / max(1, len(busy)):.1f}"],
                ["Postgres connections of the server: most", peak_connections],
                ["server peak RSS, MB", f"{rss_peak_mb(proc.pid):.0f}"],
                ["server CPU per message, ms", f"{cpu / len(members) * 1000:.1f}"],
                ["members answered twice", twice],
                ["members without a reply to their own message", wrong],
            ],
        )
    )


def _reply_to(posts: list[dict[str, Any]], user: str) -> str:
    return " ".join(str(p.get("text", "")) for p in posts if p.get("channel") == f"D{user}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=64, help="COMPANION_MODEL_CONCURRENCY")
    server_options(parser, latency=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="companion-fanout-") as data_dir:
        asyncio.run(run(args, Path(data_dir)))


if __name__ == "__main__":
    main()
