"""Slack HTTP: messages per second, latency and CPU per message through `companion run`.

    python bench/slack_http.py [--agents 50] [--messages 20] [--clients 10] [--window 8192]
                               [--latency 0] [--embedder endpoint|local|none] [--py-spy FILE]

The whole product path of Slack's HTTP mode, in separate processes as deployed:

- `companion run` as a subprocess (Slack HTTP mode: SLACK_BOT_TOKEN + SLACK_SIGNING_SECRET),
  on an embedded Postgres that this script starts in a temporary directory and migrates;
- signed Events API POSTs (`message` events in DMs, one member per agent) to its
  `/slack/events`, from --clients concurrent clients in this process;
- its Web API calls (`auth.test`, `users.info`, `chat.postMessage`, ...) go to
  `tests.fake_slack.FakeSlack` in this process (SLACK_API_URL);
- its model is `tests.fake_openai.FakeOpenAI` in this process, answering with one
  send_message call that echoes the message, at once or after --latency seconds, reporting
  no `usage` (so the fake does not tokenize the prompt); its embeddings endpoint serves the
  embedding worker too (--embedder endpoint, the default); --embedder local: the local
  model in the server's process (all-MiniLM-L6-v2 on onnxruntime, 384 dimensions), what a
  deployment without COMPANION_EMBEDDING_MODEL runs; --embedder none: no vectors at all.

Each client takes the next message of a shared list (--agents x --messages, the agents'
messages interleaved), POSTs it, and waits for the reply: the `chat.postMessage` call that
carries the message's tag. Latency = from before the POST to that call reaching FakeSlack;
the acknowledgement (Slack's 3 s deadline) is timed too. Every agent first gets one
untimed message (its member, agent and Slack profile are created then).

Messages/s = timed messages / (last reply - first POST). CPU per message = the CPU time
(user + system, /proc) of the `companion run` process over the timed window, divided by
the messages; Postgres (all its processes) and this script (clients and fakes) are
reported beside it. On a 2-core machine all of them share the same two cores. With
--profile FILE the server runs under cProfile (slower) and leaves its statistics in FILE;
with --py-spy FILE py-spy samples it during the timed run (`bench/profile.py FILE` sums it);
with --count-sql FILE it counts its SQL statements and transactions in the timed run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from sqlalchemy import text

from bench.common import (
    ROOT,
    SQL_COUNTER,
    Spy,
    machine,
    revision,
    settings_block,
    sql_count_env,
    sql_counts,
    start_sql_count,
    stats_ms,
    sticks,
    table,
    yardstick,
)
from bench.load import echo_brain
from bot.database import embedded_postgres, make_engine, migrate, serve_as_app_role
from tests.fake_openai import FakeOpenAI
from tests.fake_slack import BOT_USER, TEAM, FakeSlack, signed

SECRET = "bench-signing-secret"
TICKS = os.sysconf("SC_CLK_TCK")
TAG = re.compile(r"\[(m\d+)\]")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (all its threads), from /proc."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS


def loop_thread_cpu(pid: int) -> float:
    """User + system CPU of the process's main thread: its event loop. The rest is worker
    threads, where the local embedding model runs."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_cpu(data_dir: Path) -> float:
    """CPU of the embedded server so far: the postmaster, the backends it has reaped
    (its children's CPU) and the ones still running."""
    main = int(next(data_dir.rglob("postmaster.pid")).read_text().split()[0])
    fields = _stat(main)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(child[1]) == main:
            total += (int(child[11]) + int(child[12])) / TICKS
    return total


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def envelope(user: str, text: str, n: int) -> str:
    ts = f"17{n:08d}.000100"
    event = {
        "type": "message",
        "channel": f"D{user}",
        "user": user,
        "text": text,
        "ts": ts,
        "channel_type": "im",
        "event_ts": ts,
    }
    return json.dumps(
        {
            "token": "legacy",
            "team_id": TEAM,
            "api_app_id": "A1",
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{n}",
            "event_time": 1700000000,
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
        }
    )


EMBEDDER_TEXT = {
    "endpoint": "the fake's embeddings endpoint (16 dimensions)",
    "local": "local all-MiniLM-L6-v2 in the server's process (384 dimensions)",
    "none": "none (COMPANION_EMBEDDING_MODEL=none)",
}


class Brain:
    """The echo brain, after `latency` seconds once set (the warm-up is instant)."""

    def __init__(self) -> None:
        self.latency = 0.0

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.latency:
            await asyncio.sleep(self.latency)
        return echo_brain(body)


async def ack_buckets(http: aiohttp.ClientSession, ops_port: int) -> dict[str, float]:
    """The server's own companion_acknowledgement_seconds (each Slack request's arrival to
    its answer), cumulative by bucket; empty for a server without it (older code)."""
    try:
        async with http.get(f"http://127.0.0.1:{ops_port}/metrics") as response:
            exposition = await response.text()
    except aiohttp.ClientError:
        return {}
    buckets = {}
    for line in exposition.splitlines():
        found = re.match(r'companion_acknowledgement_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
        if found:
            buckets[found.group(1)] = float(found.group(2))
    return buckets


def ack_rows(before: dict[str, float], after: dict[str, float]) -> list[list[object]]:
    """Rows for a bench's table: of the requests between two readings, how many the server
    answered within 1, 3 and 5 s."""
    total = after.get("+Inf", 0) - before.get("+Inf", 0)
    if not total:
        return []
    return [
        [
            f"acknowledged within {s} s, as the server timed it",
            f"{after[le] - before.get(le, 0):.0f} of {total:.0f}",
        ]
        for s, le in (("1", "1.0"), ("3", "3.0"), ("5", "5.0"))
        if le in after
    ]


class Replies:
    """When each tagged message's reply reached the fake Slack."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[float]] = {}

    def expect(self, tag: str) -> asyncio.Future[float]:
        future = asyncio.get_running_loop().create_future()
        self.waiting[tag] = future
        return future

    async def on_call(self, method: str, args: dict[str, Any]) -> None:
        if method != "chat.postMessage":
            return
        found = TAG.search(str(args.get("text", "")))
        future = self.waiting.pop(found.group(1), None) if found else None
        if future is not None and not future.done():
            future.set_result(time.perf_counter())


def plan(agents: int, messages: int) -> Iterator[tuple[str, int]]:
    """(member, message number), the agents' messages interleaved."""
    n = 0
    for _ in range(messages):
        for a in range(agents):
            n += 1
            yield f"U{a:04d}", n


async def send(
    http: aiohttp.ClientSession, url: str, replies: Replies, user: str, n: int
) -> tuple[float, float, float]:
    """POST one message; returns (started, acknowledged, replied) times."""
    tag = f"m{n}"
    body = envelope(user, f"Hello there, this is message [{tag}] about my week.", n)
    reply = replies.expect(tag)
    started = time.perf_counter()
    async with http.post(url, data=body, headers=signed(body, SECRET)) as response:
        if response.status != 200:
            raise SystemExit(f"/slack/events answered {response.status}: {await response.text()}")
    acknowledged = time.perf_counter()
    replied = await asyncio.wait_for(reply, 60)
    return started, acknowledged, replied


async def wait_listening(
    http: aiohttp.ClientSession, port: int, proc: Any, seconds: float = 60.0
) -> None:
    """Until `companion run` on `port` says it is ready; exits the bench if it stops or lags."""
    for _ in range(int(seconds * 10)):
        if proc.returncode is not None:
            raise SystemExit(f"companion run exited with {proc.returncode}")
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit(f"companion run was not ready in {seconds:.0f} s")


EMBEDDERS = {"endpoint": 16, "local": 384, "none": 16}  # the vectors' size in the database


def embedding_env(embedder: str) -> dict[str, str]:
    if embedder == "local":
        return {}  # no COMPANION_EMBEDDING_MODEL: the local model
    if embedder == "none":
        return {"COMPANION_EMBEDDING_MODEL": "none"}
    return {"COMPANION_EMBEDDING_MODEL": "fake-embed", "COMPANION_EMBEDDING_DIM": "16"}


def companion_env(url: str, fake: FakeOpenAI, api: FakeSlack, port: int, args: Any) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "COMPANION_"))}
    env.update(
        DATABASE_URL=url,
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="bench",
        COMPANION_MODEL="fake",
        COMPANION_CONTEXT_WINDOW=str(args.window),
        **embedding_env(getattr(args, "embedder", "endpoint")),
        COMPANION_RATE_LIMIT="off",
        COMPANION_LOG_LEVEL="WARNING",
        SLACK_BOT_TOKEN="xoxb-bench",
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=api.base_url,
        COMPANION_HTTP_HOST="127.0.0.1",
        COMPANION_HTTP_PORT=str(port),
        PYTHONPATH=str(ROOT),
        COMPANION_OPS_PORT=str(args.ops_port),
    )
    if getattr(args, "count_sql", None):  # bench/sqlcount/sitecustomize.py counts
        env.update(sql_count_env(args.count_sql), PYTHONPATH=f"{SQL_COUNTER}{os.pathsep}{ROOT}")
    return env


@asynccontextmanager
async def served_database(data_dir: Path, embedder: str) -> AsyncIterator[tuple[str, str]]:
    """An embedded Postgres in `data_dir`, migrated for `embedder`: (the URL `companion run`
    connects with, as the app's role; the superuser's URL)."""
    async with embedded_postgres(data_dir / "pg") as admin_url:
        url = await serve_as_app_role(admin_url)
        engine = make_engine(url, pool_size=1)
        await migrate(engine, EMBEDDERS[embedder])
        await engine.dispose()
        yield url, admin_url


@asynccontextmanager
async def companion_run(env: dict[str, str], *python: str) -> AsyncIterator[Any]:
    """`companion run` in a process of its own with `env` (`python`: the interpreter's own
    options, e.g. a profiler), terminated at the end; its stderr is printed when it failed
    or the bench did."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *python,
        "-m",
        "bot.cli",
        "run",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    failed = True
    try:
        yield proc
        failed = False
    finally:
        proc.terminate()
        _, err = await proc.communicate()
        if failed or proc.returncode not in (0, -15):
            print(err.decode()[-5000:], file=sys.stderr)


async def run(args: argparse.Namespace, data_dir: Path) -> None:
    async with served_database(data_dir, args.embedder) as (url, admin_url):
        replies = Replies()
        port = free_port()
        args.ops_port = free_port()
        brain = Brain()
        async with FakeOpenAI(brain, embedding_dim=16) as fake, FakeSlack() as api:
            api.on_call = replies.on_call
            for a in range(args.agents):
                api.add_user(f"U{a:04d}")
            profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
            env = companion_env(url, fake, api, port, args)
            async with companion_run(env, *profile) as proc:
                n = await measure(args, proc, port, replies, data_dir, fake, brain, admin_url)
            if args.count_sql:
                rows = sql_counts(args.count_sql, n)
                print(table(["SQL of the timed run (companion run)", ""], rows))


async def vectors_made(url: str, seconds: float = 60.0) -> None:
    """Return once every stored message has its vector (as the superuser: the rows are
    behind the wall for the app's role)."""
    engine = make_engine(url, pool_size=1)
    try:
        for _ in range(int(seconds / 0.05)):
            async with engine.connect() as connection:
                waiting = await connection.scalar(
                    text("SELECT count(*) FROM message_vectors WHERE embedding IS NULL")
                )
            if not waiting:
                return
            await asyncio.sleep(0.05)
        raise SystemExit(f"{waiting} messages still had no vector after {seconds:.0f} s")
    finally:
        await engine.dispose()


async def measure(
    args: argparse.Namespace,
    proc: Any,
    port: int,
    replies: Replies,
    data_dir: Path,
    fake: FakeOpenAI,
    brain: Brain,
    admin_url: str,
) -> int:
    url = f"http://127.0.0.1:{port}/slack/events"
    connector = aiohttp.TCPConnector(limit=args.clients)
    async with aiohttp.ClientSession(connector=connector) as http:
        await wait_listening(http, port, proc)
        n0 = 10_000_000
        warm = [(f"U{a:04d}", n0 + a) for a in range(args.agents)]
        await asyncio.gather(*(send(http, url, replies, user, n) for user, n in warm))
        todo = list(plan(args.agents, args.messages))
        todo.reverse()
        done: list[tuple[float, float, float]] = []
        calls_before = len(fake.requests)

        async def client() -> None:
            while todo:
                user, n = todo.pop()
                done.append(await send(http, url, replies, user, n))

        brain.latency = args.latency
        start_sql_count(proc.pid, args.count_sql)
        stick = [yardstick()]
        acks_before = await ack_buckets(http, args.ops_port)
        with Spy(proc.pid, args.py_spy):
            cpu0, pg0, own0 = cpu_seconds(proc.pid), postgres_cpu(data_dir), own_cpu()
            loop0 = loop_thread_cpu(proc.pid)
            load = os.getloadavg()
            await asyncio.gather(*(client() for _ in range(args.clients)))
            if args.embedder != "none":  # the vectors of the last messages count too
                await vectors_made(admin_url)
            cpu, pg_cpu = cpu_seconds(proc.pid) - cpu0, postgres_cpu(data_dir) - pg0
            loop_cpu = loop_thread_cpu(proc.pid) - loop0
        own = own_cpu() - own0
        calls = len(fake.requests) - calls_before
        server_acks = ack_rows(acks_before, await ack_buckets(http, args.ops_port))
        stick.append(yardstick())
    n = len(done)
    first = min(d[0] for d in done)
    last = max(d[2] for d in done)
    latency = stats_ms([d[2] - d[0] for d in done])
    ack = stats_ms([d[1] - d[0] for d in done])
    print(
        settings_block(
            "Settings",
            {
                "machine": machine(),
                "load during the run": " ".join(f"{x:.2f}" for x in load) + " (at its start)",
                "code": revision(),
                "server": "companion run (Slack HTTP mode), its own process",
                "database": "embedded Postgres, served as companion_app",
                "model": "tests.fake_openai.FakeOpenAI, echo in one send_message, no usage, "
                + (f"{args.latency:g} s per call" if args.latency else "at once"),
                "embedder": EMBEDDER_TEXT[args.embedder],
                "Slack Web API": "tests.fake_slack.FakeSlack",
                "load": f"{args.agents} agents x {args.messages} messages, {args.clients} "
                "clients, each waits for its reply before the next",
                "context window": args.window,
            },
        )
    )
    print(f"\nchat model calls (with tools or summaries) during the timed run: {calls}")
    print(
        table(
            ["measure", "value"],
            [
                ["messages", n],
                ["messages/s", f"{n / (last - first):.1f}"],
                ["latency p50 (POST to chat.postMessage), ms", f"{latency['median']:.0f}"],
                ["latency p95, ms", f"{latency['p95']:.0f}"],
                ["acknowledgement p50 / p95, ms", f"{ack['median']:.0f} / {ack['p95']:.0f}"],
                ["companion run CPU per message, ms", f"{cpu / n * 1000:.1f}"],
                [
                    "  of which worker threads (the local embedding model), ms",
                    f"{(cpu - loop_cpu) / n * 1000:.1f}",
                ],
                ["Postgres CPU per message (all its processes), ms", f"{pg_cpu / n * 1000:.1f}"],
                ["this script CPU per message (clients, fakes), ms", f"{own / n * 1000:.1f}"],
                *server_acks,
                ["CPU yardstick at start / end, ms (bench.common.yardstick)", sticks(stick)],
            ],
        )
    )
    return n


def server_options(parser: argparse.ArgumentParser, latency: float) -> None:
    """The options of a bench that runs one `companion run` against the fakes."""
    parser.add_argument("--latency", type=float, default=latency, help="seconds per model call")
    parser.add_argument("--window", type=int, default=8192, help="COMPANION_CONTEXT_WINDOW")
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), default="endpoint")
    parser.add_argument("--py-spy", help="sample the server with py-spy, raw stacks to this file")
    parser.add_argument("--count-sql", help="count the server's timed SQL into this file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20, help="timed messages per agent")
    parser.add_argument("--clients", type=int, default=10, help="concurrent senders")
    parser.add_argument("--profile", help="run companion under cProfile, its stats to this file")
    server_options(parser, latency=0.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="companion-bench-") as data_dir:
        asyncio.run(run(args, Path(data_dir)))


if __name__ == "__main__":
    main()
