"""Postgres as operators really have it: a managed server's plain login role, and the
embedded default, each walled in by row-level security.

These tests run on a cluster of their own (roles are cluster-wide, so `companion_member` and
`companion_app` must not exist here unless a test makes them). A managed server is played by
a login role that is neither superuser nor CREATEROLE nor CREATEDB, owning a fresh database;
the admin's part is the SQL that deploy/README.md tells an admin to run, read from there.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import openai
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.database import (
    buffer_cache_mb,
    embedded_postgres,
    make_engine,
    migrate,
    open_database,
    serve_as_app_role,
)
from bot.doctor import run_doctor
from bot.migrations import MIGRATIONS
from core.config import EngineConfig
from core.directory import ensure_agent
from core.errors import ConfigError
from core.events import EventKind, InboundEvent
from core.llm import OpenAIChat
from core.memory.tokens import TokenCounter
from core.memory.turn import Mind
from core.runtime.engine import Engine
from core.scope import enter_scope
from tests.conftest import ROOT, cli_env, companion

MEMBER_TABLES = ("agents", "users", "blocks", "messages", "events", "outbox")


@pytest.fixture(scope="module")
async def cluster() -> AsyncIterator[tuple[str, Path]]:
    """(superuser URL, data directory) of a fresh embedded cluster, for this module only."""
    data_dir = Path(tempfile.mkdtemp(prefix="companion-managed-pg-"))
    try:
        async with embedded_postgres(data_dir) as url:
            yield url, data_dir
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def url_as(url: str, user: str, database: str) -> str:
    return make_url(url).set(username=user, database=database).render_as_string(False)


async def as_admin(url: str, *statements: str, database: str = "postgres") -> None:
    engine = make_engine(url_as(url, "postgres", database)).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    try:
        async with engine.connect() as connection:
            for statement in statements:
                await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def plain_role(url: str, name: str, owns_database: bool = True) -> str:
    """A login role as a managed server hands it out; returns its URL to its database."""
    owner = name if owns_database else "postgres"
    await as_admin(
        url,
        f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS",
        f"CREATE DATABASE {name} OWNER {owner}",
    )
    return url_as(url, name, name)


def admins_sql() -> list[str]:
    """The one-time SQL deploy/README.md gives an admin, statement by statement."""
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("### Managed PostgreSQL", 1)[1]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block, "deploy/README.md: no ```sql block under 'Managed PostgreSQL'"
    lines = [line for line in block.group(1).splitlines() if not line.startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def build_engine(sessions, fake) -> tuple[Engine, openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    mind = Mind(OpenAIChat(client, "fake"), TokenCounter(), EngineConfig(rate_limit=None))
    return Engine(sessions, mind), client


async def visible_agents(sessions, scope, *escape: str) -> set[int]:
    """Agent ids an unfiltered query sees inside `scope`'s transaction after `escape`."""
    seen: set[int] = set()
    async with sessions() as session, session.begin():
        await enter_scope(session, scope)
        for statement in escape:
            await session.execute(text(statement))
        for table in MEMBER_TABLES:
            column = "id" if table == "agents" else "agent_id"
            if table == "users":
                continue
            rows = await session.execute(text(f"SELECT {column} FROM {table}"))
            seen |= set(rows.scalars())
    return seen


async def test_a_plain_role_runs_companion_behind_the_wall(cluster, fake, tmp_path):
    url, _ = cluster
    app = await plain_role(url, "app_walled")
    await as_admin(url, *admins_sql(), database="app_walled")
    async with open_database(app, tmp_path, 16) as (sessions, _):
        async with sessions() as session:
            role = (
                await session.execute(
                    text(
                        "SELECT rolsuper, rolcreaterole, rolbypassrls FROM pg_roles "
                        "WHERE rolname = current_user"
                    )
                )
            ).one()
        assert tuple(role) == (False, False, False)
        engine, client = build_engine(sessions, fake)
        async with client, aclosing(engine):
            ann, bob = await engine.agent("t", "ann"), await engine.agent("t", "bob")
            for scope, words in ((ann, "hello from ann"), (bob, "hello from bob")):
                said = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words))
                assert said.replies == [f"You said: {words}"]
        for scope in (ann, bob):
            assert await visible_agents(sessions, scope) == {scope.agent_id}
            # Leaving a role widens nothing: the policies bind the connection's own role.
            assert await visible_agents(sessions, scope, "RESET ROLE") == {scope.agent_id}
        # Operator-wide work (no member entered) sees every member.
        async with sessions() as session:
            assert await session.scalar(text("SELECT count(*) FROM agents")) == 2


async def test_without_pgvector_the_migration_says_what_an_admin_runs(cluster, fake):
    url, _ = cluster
    app = await plain_role(url, "app_novector")
    out = io.StringIO()
    await run_doctor(cli_env(fake, app), out)
    (vector,) = [line for line in out.getvalue().splitlines() if "pgvector" in line]
    assert vector.startswith("FAIL pgvector: not created in database app_novector")
    assert "may not create it" in vector and "CREATE EXTENSION vector" in vector
    engine = make_engine(app)
    try:
        with pytest.raises(ConfigError) as error:
            await migrate(engine, 16)
        said = str(error.value)
        assert "\n" not in said
        assert "CREATE EXTENSION vector" in said and "app_novector" in said
        # The lock was given back: the admin runs the SQL, and the next start migrates.
        await as_admin(url, *admins_sql(), database="app_novector")
        assert await migrate(engine, 16) == 16
    finally:
        await engine.dispose()


async def test_without_create_on_the_schema_the_migration_says_so(cluster):
    url, _ = cluster
    app = await plain_role(url, "app_noschema", owns_database=False)
    await as_admin(url, *admins_sql(), database="app_noschema")
    engine = make_engine(app)
    try:
        with pytest.raises(ConfigError) as error:
            await migrate(engine, 16)
    finally:
        await engine.dispose()
    said = str(error.value)
    assert "\n" not in said
    assert "permission denied for schema public" in said and "app_noschema" in said


async def test_doctor_reports_the_wall(cluster, fake, tmp_path):
    url, _ = cluster
    app = await plain_role(url, "app_doctor")
    await as_admin(url, *admins_sql(), database="app_doctor")
    async with open_database(app, tmp_path, 16):
        pass
    out = io.StringIO()
    await run_doctor(cli_env(fake, app), out)
    (wall,) = [line for line in out.getvalue().splitlines() if "row-level security" in line]
    assert wall.startswith("ok   row-level security: on"), wall

    # A superuser bypasses every policy: the wall holds only by switching roles, and a
    # transaction that resets its role leaves it. The doctor says so, and what to do.
    superuser = url_as(url, "postgres", "app_doctor")
    out = io.StringIO()
    await run_doctor(cli_env(fake, superuser), out)
    (wall,) = [line for line in out.getvalue().splitlines() if "row-level security" in line]
    assert wall.startswith("warn row-level security:") and "superuser" in wall, wall
    assert "deploy/README.md" in wall


async def test_the_embedded_default_serves_as_an_ordinary_role(cluster, fake):
    url, data_dir = cluster
    env = cli_env(fake, url, COMPANION_DATA_DIR=str(data_dir))
    del env["DATABASE_URL"]  # the embedded default: this cluster, joined by the subprocess
    for user in ("ann", "bob"):
        said = await companion(env, "chat", "--user", user, stdin=f"hi from {user}\n")
        assert (said.code, said.out) == (0, f"You said: hi from {user}\n"), said
    engine = make_engine(url)
    try:
        async with engine.connect() as connection:
            owner, superuser = (
                await connection.execute(
                    text(
                        "SELECT tableowner, (SELECT rolsuper FROM pg_roles r "
                        "WHERE r.rolname = t.tableowner) FROM pg_tables t "
                        "WHERE schemaname = 'public' AND tablename = 'messages'"
                    )
                )
            ).one()
    finally:
        await engine.dispose()
    assert (owner, superuser) == ("companion_app", False)
    # In a subprocess too: leaving the embedded server in this process would stop it.
    doctor = await companion(env, "doctor")
    (wall,) = [line for line in doctor.out.splitlines() if "row-level security" in line]
    assert wall.startswith("ok   row-level security: on") and "companion_app" in wall, wall


async def test_an_older_embedded_database_is_handed_to_the_ordinary_role(cluster):
    """Before 0009 the embedded database was served as its superuser, who owns the tables:
    the next start hands them to `companion_app`, and every member's memory is still there."""
    url, _ = cluster
    await as_admin(url, "CREATE DATABASE legacy")
    old = make_engine(url_as(url, "postgres", "legacy"))
    try:
        async with old.connect() as connection:
            await connection.execute(text("CREATE EXTENSION vector"))
            await connection.run_sync(upgrade_to, "0006")
            await connection.commit()
        sessions = async_sessionmaker(old, expire_on_commit=False)
        async with sessions() as session, session.begin():
            ann = await ensure_agent(session, "t", "ann", EngineConfig())
            bob = await ensure_agent(session, "t", "bob", EngineConfig())
    finally:
        await old.dispose()
    served = await serve_as_app_role(url_as(url, "postgres", "legacy"))
    engine = make_engine(served)
    try:
        assert await migrate(engine, 16) == 16
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        for scope in (ann, bob):
            assert await visible_agents(sessions, scope, "RESET ROLE") == {scope.agent_id}
        async with sessions() as session:
            owners = set(
                await session.scalars(
                    text("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
                )
            )
        assert owners == {"companion_app"}
    finally:
        await engine.dispose()


def upgrade_to(connection, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = 16
    command.upgrade(config, revision)


async def test_the_embedded_server_has_a_buffer_cache_for_vector_search():
    """A quarter of the machine's memory, 128 MB to 2 GB, from the second start of a new data
    directory on (recorded at the first: the server may already be shared then): the
    default 128 MB held no HNSW index of a member with 100k messages."""
    assert [buffer_cache_mb(mb * 2**20) for mb in (256, 2048, 4096, 65536)] == [
        128,
        512,
        1024,
        2048,
    ]
    active = []
    data_dir = Path(tempfile.mkdtemp(prefix="companion-cache-pg-"))
    for _ in range(2):
        async with embedded_postgres(data_dir) as url:
            engine = make_engine(url)
            try:
                async with engine.connect() as connection:
                    active.append(
                        await connection.scalar(
                            text(
                                "SELECT setting::bigint * 8 / 1024 FROM pg_settings "
                                "WHERE name = 'shared_buffers'"
                            )
                        )
                    )
            finally:
                await engine.dispose()
    shutil.rmtree(data_dir, ignore_errors=True)
    assert active == [128, buffer_cache_mb()]
