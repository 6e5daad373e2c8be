"""Migrations: the revisions in migrations/versions and bringing a database to the newest.

    revisions()        every revision, read from its file without importing alembic: its
                       parent, title and whether it `rewrites_tables`
    pending(current)   what a database at `current` still needs, oldest first
    migrate(engine)    apply them: one transaction per revision (env.py), one process at a
                       time (an advisory lock), a line per revision to `progress`

`companion migrate` applies every pending revision. Any other command applies them itself
at its start, unless one of them rewrites tables on a database that already has tables:
that start stops with one line naming `companion migrate` (`MigrationNeeded`), so no
replica rewrites whole tables while others serve. A new database (every table empty) is
migrated by whichever command comes first. What stops a migration is said in one line
(`ConfigError`), e.g. the SQL an admin runs when the user may not create pgvector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from core.errors import ConfigError, MigrationNeeded

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
MIGRATION_LOCK = 0x636F6D70  # "comp"
LOCK_RETRY_SECONDS = 0.2
ADMIN_SQL = "CREATE EXTENSION vector;"
MANAGED = "deploy/README.md, Managed PostgreSQL"


Progress = Callable[[str], None]  # hears one line per revision applied


def _upgrade(connection: Any, embedding_dim: int, progress: Progress, schema: str | None) -> None:
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
    # A configured schema's own version table (as `current_revisions` reads it), not one
    # alembic would see further along the search path.
    config.attributes["version_table_schema"] = schema
    opts = {"version_table_schema": schema}
    before = MigrationContext.configure(connection, opts=opts).get_current_heads()
    connection.commit()  # each revision then runs in a transaction of its own (env.py)
    command.upgrade(config, "head")
    after = MigrationContext.configure(connection, opts=opts).get_current_heads()
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
async def migration_lock(connection: AsyncConnection) -> AsyncIterator[None]:
    """One process at a time migrates; the lock is given back even after a failed step.

    A process waits for the lock by trying it now and then, with no transaction open in
    between: a blocked `pg_advisory_lock` holds a snapshot, and the holder's
    `CREATE INDEX CONCURRENTLY` waits for every older snapshot to end (a deadlock that
    Postgres breaks by failing one of the two starts)."""
    await connection.rollback()
    while True:
        taken = await connection.scalar(
            text("SELECT pg_try_advisory_lock(:k)"), {"k": MIGRATION_LOCK}
        )
        await connection.commit()
        if taken:
            break
        await asyncio.sleep(LOCK_RETRY_SECONDS)
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


async def create_vector(connection: AsyncConnection) -> None:
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
    connection: AsyncConnection, embedding_dim: int, progress: Progress, schema: str | None
) -> None:
    try:
        await connection.run_sync(_upgrade, embedding_dim, progress, schema)
        await connection.commit()
    except DBAPIError as error:
        await connection.rollback()
        database, user = await _where(connection)
        hint = ""
        if getattr(error.orig, "sqlstate", None) == "42501":  # insufficient_privilege
            hint = f"; {user} must own the database or its schema ({MANAGED})"
        at = ", ".join(sorted(await current_revisions(connection, schema) or ())) or "no revision"
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


async def current_revisions(
    connection: AsyncConnection, schema: str | None = None
) -> set[str] | None:
    """The database's revisions; None for a database Companion never migrated.

    A configured `schema` (COMPANION_DB_SCHEMA, an eval's) is read alone: its search path
    goes on to `public` (for pgvector's types), whose alembic_version would otherwise be
    read as its own, and every table of public's used as its."""
    name = f"{schema}.alembic_version" if schema else "alembic_version"
    table = await connection.scalar(text("SELECT to_regclass(:name)::text"), {"name": name})
    if table is None:
        return None
    return set(await connection.scalars(text(f"SELECT version_num FROM {table}")))


def _refuse_unknown(current: set[str] | None) -> None:
    """A revision this version does not know: a newer Companion migrated the database."""
    unknown = sorted((current or set()) - set(revisions()))
    if unknown:
        raise ConfigError(
            f"the database is at revision {', '.join(unknown)}, which this version of "
            "Companion does not know: a newer version migrated it; run that version (or "
            "restore a backup taken before it)"
        )


def _refuse_rewrites(current: set[str] | None) -> None:
    """A database with tables that needs a table-rewriting revision is `companion migrate`'s."""
    _refuse_unknown(current)
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
    schema: str | None = None,
) -> int:
    """Bring the schema to the newest revision; returns the dimension the database holds.

    `rewrite_tables=False` (every command but `companion migrate`): a pending revision that
    rewrites tables stops it with `MigrationNeeded` before anything is applied. `progress`
    hears a first line and one per revision applied (else they are logged at DEBUG)."""
    say = progress or (lambda line: log.debug("%s", line))
    async with engine.connect() as connection:
        current = await current_revisions(connection, schema)
        if current != newest_revisions():
            if not rewrite_tables:
                _refuse_rewrites(current)
            async with migration_lock(connection):
                await create_vector(connection)
                await _apply(connection, embedding_dim, rewrite_tables, say, schema)
        held = await connection.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        await connection.rollback()
    return int(held)


async def _apply(
    connection: AsyncConnection,
    embedding_dim: int,
    rewrite_tables: bool,
    say: Progress,
    schema: str | None,
) -> None:
    """What is still pending once the lock is ours (another process may have done it)."""
    current = await current_revisions(connection, schema)
    await connection.rollback()
    _refuse_unknown(current)
    if not rewrite_tables:
        _refuse_rewrites(current)
    todo = pending(current or set())
    if todo:
        at = ", ".join(sorted(current or ())) or "nothing (a new database)"
        many = f"{len(todo)} revisions" if len(todo) > 1 else "1 revision"
        say(f"migrating the database from {at} to {todo[-1].name}: {many}")
        await _upgrade_to_head(connection, embedding_dim, say, schema)
