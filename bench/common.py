"""Shared helpers for the benchmark scripts: a throwaway database, stats, tables, text.

Not a benchmark itself. Each script in bench/ adds the repository root to sys.path and
imports this module as `bench.common`.
"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.database import APP_ROLE, embedded_postgres, make_engine, migrate, serve_as_app_role
from core.ports import Completion, ToolCall
from tests.fake_openai import last_user_text

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Database:
    engine: AsyncEngine  # SQLAlchemy engine on the migrated schema, as Companion connects
    url: str  # asyncpg-flavoured SQLAlchemy URL of the server, as Companion connects
    schema: str | None  # None: the embedded server's default schema
    where: str  # a human description, for the settings printout
    admin_url: str  # the same server as its superuser (embedded) or as `url` (given)

    async def raw(self) -> asyncpg.Connection:
        """A plain asyncpg connection on the same schema for COPY and bulk SQL, as the
        superuser where there is one: COPY into a table with row-level security is refused
        to the roles it binds."""
        dsn = make_url(self.admin_url).set(drivername="postgresql").render_as_string(False)
        settings = {"search_path": f"{self.schema},public"} if self.schema else {}
        return await asyncpg.connect(dsn, server_settings=settings)


@asynccontextmanager
async def bench_database(
    database_url: str | None, embedding_dim: int = 16, pool_size: int = 10
) -> AsyncIterator[Database]:
    """A migrated database that is thrown away afterwards, served as Companion serves it.

    Without a URL: an embedded Postgres in a temporary directory, used as the ordinary role
    `companion_app` (bot.database.serve_as_app_role), bound by the member wall as the
    product is. With one: a fresh schema on that server, as that URL's user, dropped at the
    end.
    """
    if database_url:
        schema = f"bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        admin = make_engine(database_url)
        async with admin.begin() as conn:
            await conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            engine = make_engine(database_url, schema=schema, pool_size=pool_size)
            try:
                await migrate(engine, embedding_dim)
                host = make_url(database_url).host or "local socket"
                where = f"schema {schema} on {host}"
                yield Database(engine, database_url, schema, where, database_url)
            finally:
                await engine.dispose()
        finally:
            async with admin.begin() as conn:
                await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            await admin.dispose()
        return
    with tempfile.TemporaryDirectory(prefix="companion-bench-") as data_dir:
        # A deployment's server past its first start: settings recorded then (the buffer
        # cache, bot.database) take effect from the second.
        async with embedded_postgres(Path(data_dir)):
            pass
        async with embedded_postgres(Path(data_dir)) as admin_url:
            url = await serve_as_app_role(admin_url)
            engine = make_engine(url, pool_size=pool_size)
            try:
                await migrate(engine, embedding_dim)
                where = f"embedded Postgres in a temporary directory, as {APP_ROLE}"
                yield Database(engine, url, None, where, admin_url)
            finally:
                await engine.dispose()


async def server_version(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        pg = await conn.scalar(text("SHOW server_version"))
        vector = await conn.scalar(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        )
    return f"PostgreSQL {pg}, pgvector {vector}"


def revision() -> str:
    """The git commit of the code under test, marked when core/bot/migrations have edits."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "core", "bot", "migrations"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head or 'unknown'}{' with uncommitted changes' if dirty else ''}"


class Spy:
    """py-spy sampling one process while a bench's timed window runs (`--py-spy FILE`):
    stacks holding the GIL, 100 a second, in py-spy's raw (collapsed) format, which
    `bench/profile.py FILE` sums by function. py-spy is not a dependency: pip install py-spy."""

    def __init__(self, pid: int, path: str | None) -> None:
        self.pid, self.path = pid, path
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Spy:
        if self.path:
            spy = Path(sys.executable).with_name("py-spy")
            command = [str(spy) if spy.exists() else "py-spy", "record", "--pid", str(self.pid)]
            command += ["--format", "raw", "--gil", "--nonblocking", "-o", self.path]
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            self.proc.wait(60)


SQL_COUNTER = ROOT / "bench" / "sqlcount"


def sql_count_env(path: str | None) -> dict[str, str]:
    """The environment that makes a `companion run` count its SQL (--count-sql)."""
    return {"COMPANION_SQL_COUNT": path} if path else {}


def start_sql_count(pid: int, path: str | None) -> None:
    if path:
        os.kill(pid, signal.SIGUSR1)


def sql_counts(path: str | None, messages: int) -> list[list[object]]:
    """Rows for a bench's table: statements and transactions per message, and the most
    frequent statements (the server writes them when it exits)."""
    if not path or not Path(path).exists():
        return []
    lines = Path(path).read_text().splitlines()
    statements, transactions = (int(x) for x in lines[0].split())
    rows: list[list[object]] = [
        ["SQL statements per message", f"{statements / messages:.1f}"],
        ["transactions per message", f"{transactions / messages:.1f}"],
    ]
    for line in lines[1:9]:
        n, statement = line.split("\t", 1)
        rows.append([f"  {int(n) / messages:.2f}/msg  {statement[:70]}", ""])
    return rows


def yardstick() -> float:
    """CPU milliseconds of a fixed piece of pure Python: on a machine shared with other
    work a CPU millisecond buys less (other processes on the same cores, in their caches),
    so a bench prints this beside its CPU figures, at the start and end of its timed run:
    CPU figures of two runs compare in proportion to it."""
    started = time.process_time()
    total = 0
    for i in range(300_000):
        total += len(str(i)) ^ (i & 7)
    json.dumps([{"n": i, "s": str(i)} for i in range(5_000)])
    return (time.process_time() - started) * 1000


def sticks(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load} at start"
    )


# ---------------------------------------------------------------- statistics and tables


def p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def stats_ms(seconds: Sequence[float]) -> dict[str, float]:
    """median, p95, mean and max of durations given in seconds, in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "median": statistics.median(ms),
        "p95": p95(ms),
        "mean": statistics.fmean(ms),
        "max": max(ms),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; floats get two decimals, columns after the first align right."""

    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in cells)])


def settings_block(title: str, settings: dict[str, object]) -> str:
    width = max(len(k) for k in settings)
    lines = [title] + [f"  {k.ljust(width)}  {v}" for k, v in settings.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------- varied English text

PEOPLE = (
    "sister brother mom dad grandma grandpa aunt uncle cousin boss coworker neighbor roommate "
    "girlfriend boyfriend wife husband daughter son friend teacher doctor coach landlord"
).split()
NAMES = (
    "Dana Priya Marco Aisha Tom Lena Kenji Sofia Omar Grace Lucas Nina Diego Hannah Ravi Chloe "
    "Mateo Yuki Sam Olivia Felix Zoe Ahmed Clara"
).split()
ACTIVITIES = (
    "hiking cooking painting running swimming baking gardening climbing cycling knitting "
    "reading writing drawing dancing singing fishing camping skiing surfing yoga chess "
    "photography pottery woodworking volunteering studying"
).split()
PLACES = (
    "the park|the beach|the office|the gym|the library|the mountains|the lake|the city|"
    "the farmers market|the museum|the cafe|the hospital|the airport|the concert|the river|"
    "Lisbon|Tokyo|Chicago|the countryside|the bakery|the zoo|the stadium|the mall|school"
).split("|")
THINGS = (
    "dog cat guitar piano cello bike car laptop phone garden apartment house novel recipe "
    "cake painting camera tent jacket shoes ticket job interview exam promotion wedding "
    "birthday party vacation trip project deadline presentation course podcast movie album "
    "puppy kitten plant sweater backpack"
).split()
TIMES = (
    "yesterday|last week|last weekend|this morning|tonight|on Monday|on Friday|in June|"
    "in October|last summer|over the holidays|next month|two days ago|last year|this spring"
).split("|")
FEELINGS = (
    "happy excited nervous tired stressed proud grateful anxious relieved curious bored sad "
    "lonely hopeful frustrated calm"
).split()
ADJECTIVES = (
    "new old little big beautiful strange wonderful terrible quiet noisy cozy expensive cheap "
    "favorite amazing awful lovely huge tiny"
).split()

_TEMPLATES = (
    "I went {activity} with my {person} at {place} {time}.",
    "My {person} {name} is getting a {adj} {thing} {time}.",
    "I feel {feeling} about the {thing} {time}, to be honest.",
    "We talked about {activity} and my {adj} {thing} for hours.",
    "Did I tell you that {name} started {activity} {time}?",
    "{time}, I finally took my {thing} to {place}.",
    "I'm {feeling} because my {person} forgot about the {thing}.",
    "Honestly {activity} helps me when I'm {feeling}.",
    "That sounds {adj}! How did {name} like {place}?",
    "I'm so glad the {thing} worked out. Tell me more about {activity}.",
    "{name} and I want to try {activity} near {place} {time}.",
    "The {adj} {thing} from {place} still makes me {feeling}.",
    "Remember when my {person} lost the {thing} at {place}?",
    "I have been {feeling} since the {thing} {time}.",
    "My {person} thinks I should stop {activity}, but I love it.",
)


def sentence(rng: random.Random) -> str:
    template = rng.choice(_TEMPLATES)
    text = template.format(
        activity=rng.choice(ACTIVITIES),
        person=rng.choice(PEOPLE),
        name=rng.choice(NAMES),
        place=rng.choice(PLACES),
        thing=rng.choice(THINGS),
        time=rng.choice(TIMES),
        feeling=rng.choice(FEELINGS),
        adj=rng.choice(ADJECTIVES),
    )
    return text[0].upper() + text[1:]


def chat_line(rng: random.Random) -> str:
    """One to three sentences: what one side of a chat says in one message."""
    return " ".join(sentence(rng) for _ in range(rng.choice((1, 1, 2, 2, 3))))


_QUESTIONS = (
    "what did I say about my {person}'s {thing}",
    "when did I go {activity} at {place}",
    "did I mention {name} and the {thing}",
    "how was my trip to {place} with my {person}",
    "what do you remember about my {adj} {thing}",
    "why was I {feeling} about {activity}",
    "{name} {activity} {place}",
    "the {thing} my {person} bought",
)


def question(rng: random.Random) -> str:
    """A natural-language question of the kind an agent would search recall with."""
    return rng.choice(_QUESTIONS).format(
        activity=rng.choice(ACTIVITIES),
        person=rng.choice(PEOPLE),
        name=rng.choice(NAMES),
        place=rng.choice(PLACES),
        thing=rng.choice(THINGS),
        feeling=rng.choice(FEELINGS),
        adj=rng.choice(ADJECTIVES),
    )


class InstantModel:
    """A chat model that answers at once and in process: one send_message call echoing the
    member ("You said: ..."), or a one-line summary when the summarizer asks."""

    def __init__(self) -> None:
        self.n = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
    ) -> Completion:
        self.n += 1
        if not tools:  # the summarizer calls without tools
            return Completion("Summary: they chatted about their week.")
        said = last_user_text({"messages": messages})
        arguments = json.dumps({"message": f"You said: {said}"})
        return Completion(None, (ToolCall(f"call_{self.n}", "send_message", arguments),))


def stop_warm_servers(root: Path) -> None:
    """Stop the embedded servers under `root` that commands left running for the next one
    (`bot.idle_stop`), before their folders go: Postgres' fast shutdown, up to 10 s each."""
    for pid_file in root.glob("**/postgres/postmaster.pid"):
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        except (ProcessLookupError, FileNotFoundError, ValueError):
            continue
        for _ in range(100):
            if not pid_file.exists():
                break
            time.sleep(0.1)
