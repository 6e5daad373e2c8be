"""The database checks: reachable, migrated, pgvector, the embedding size, the wall."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from bot import idle_stop, wall
from bot.database import APP_ROLE, as_role, asyncpg_url, database_server, make_engine
from bot.doctor.results import TIMEOUT, Result, fail, ok, warn
from bot.doctor.results import why as _why
from bot.migrations import (
    ADMIN_SQL,
    MANAGED,
    current_revisions,
    newest_revisions,
    pending,
    revisions,
)
from bot.settings import Settings
from core.errors import CompanionError


async def _migrations(
    connection: AsyncConnection, schema: str | None
) -> tuple[set[str], set[str], set[str]]:
    """(revisions the database is at, the newest revisions in migrations/, all of them), the
    scripts read as text (importing alembic and every script took a second)."""
    at = await current_revisions(connection, schema)
    return at or set(), newest_revisions(), set(revisions())


async def _missing_vector(connection: AsyncConnection) -> Result:
    """Why pgvector is not in this database, and who can fix it: a fresh database where
    Companion may create it is the normal first state, not a failure."""
    available, creatable, database = (
        await connection.execute(
            text(
                "SELECT count(v.name) > 0, bool_or(r.rolsuper OR (v.trusted AND "
                "has_database_privilege(current_database(), 'CREATE'))), current_database() "
                "FROM pg_roles r LEFT JOIN pg_available_extension_versions v "
                "ON v.name = 'vector' WHERE r.rolname = current_user"
            )
        )
    ).one()
    if not available:
        return fail(
            "pgvector: not installed on this PostgreSQL server; install pgvector "
            "(https://github.com/pgvector/pgvector) or leave DATABASE_URL unset to use "
            "the embedded database"
        )
    if creatable:
        return ok("pgvector: available; the first companion command creates it in this database")
    return fail(
        f"pgvector: not created in database {database}, and this user may not create it; an "
        f"admin runs once, connected to {database}: {ADMIN_SQL} ({MANAGED})"
    )


async def _schema_checks(connection: AsyncConnection, settings: Settings) -> list[Result]:
    results = []
    current, newest, known = await _migrations(connection, settings.db_schema)
    if current == newest:
        results.append(ok(f"database migrations: at the newest revision ({', '.join(newest)})"))
    elif not current:
        results.append(
            ok(
                "database migrations: a fresh database; the first companion command creates "
                "the tables"
            )
        )
    elif current <= known:
        at, head = ", ".join(sorted(current)), ", ".join(sorted(newest))
        heavy = [r.name for r in pending(current) if r.rewrites_tables]
        if heavy:
            results.append(
                warn(
                    f"database migrations: at {at}; revision {heavy[0]} rewrites tables: run "
                    f"`companion migrate` once (to {head}); until then no other command starts"
                )
            )
        else:
            next_one = f"the next companion command migrates it to {head}"
            results.append(ok(f"database migrations: at {at}; {next_one}"))
    else:
        results.append(
            fail(
                f"database migrations: the database is at {', '.join(sorted(current - known))}, "
                "a revision this version of Companion does not know: it was migrated by a newer "
                "version; run that version (or restore a backup taken before it)"
            )
        )
    version = await connection.scalar(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    )
    if version is None:
        results.append(await _missing_vector(connection))
        return results
    held = made_by = None
    if await connection.scalar(text("SELECT to_regclass('meta') IS NOT NULL")):
        held = await connection.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
        made_by = await connection.scalar(
            text("SELECT value FROM meta WHERE key = 'embedding_model'")
        )
    switched = settings.embedding_model != "none" and made_by not in (None, settings.embedder_name)
    if (held is None or int(held) == settings.embedding_dim) and switched:
        results.append(
            fail(
                f"pgvector {version}; the stored embeddings were made by {made_by}, not "
                f"{settings.embedder_name}: run `companion reembed`, or set "
                "COMPANION_EMBEDDING_MODEL back to the model that made them"
            )
        )
    elif held is None or int(held) == settings.embedding_dim:
        results.append(ok(f"pgvector {version}; embeddings of {settings.embedding_dim} dimensions"))
    elif not await _holds_vectors(connection):
        results.append(
            ok(
                f"pgvector {version}; no vector stored yet: the {held}-dimension columns take "
                f"the embedder's {settings.embedding_dim} at the next start"
            )
        )
    elif settings.embeds_in_process:
        results.append(
            fail(
                f"pgvector {version}; the database holds {held}-dimension embeddings and "
                f"{settings.embedder_said} gives {settings.embedding_dim}: run `companion reembed "
                f"--dim {settings.embedding_dim}`, or set COMPANION_EMBEDDING_MODEL (and "
                f"COMPANION_EMBEDDING_DIM={held}) back to the model that made them"
            )
        )
    else:
        results.append(
            fail(
                f"pgvector {version}; the database holds {held}-dimension embeddings but "
                f"COMPANION_EMBEDDING_DIM is {settings.embedding_dim}: set it back to {held}, "
                f"or run `companion reembed --dim {settings.embedding_dim}`"
            )
        )
    return results


async def _holds_vectors(connection: AsyncConnection) -> bool:
    """Whether any message or passage has a vector (messages have none before 0012, and
    keep them in `message_vectors` from 0018; passages in `passage_vectors` from 0026)."""
    for table in ("message_vectors", "messages", "passage_vectors", "passages"):
        has_column = await connection.scalar(
            text(
                "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = :t AND column_name = 'embedding')"
            ),
            {"t": table},
        )
        if has_column and await connection.scalar(
            text(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE embedding IS NOT NULL)")
        ):
            return True
    return False


async def _wall(connection: AsyncConnection) -> Result:
    """Probe a member's transaction (rolled back): do the policies bind it, also after the
    transaction resets its role?"""
    who = await connection.scalar(text("SELECT current_user"))
    if await connection.scalar(text("SELECT to_regproc('companion_enter') IS NULL")):
        return ok("row-level security: set up with the tables by the first companion command")
    try:
        await connection.execute(text("SELECT companion_enter(0, 0)"))  # no such member
        bound = await connection.scalar(text("SELECT row_security_active('messages')"))
        await connection.execute(text("RESET ROLE"))
        held = await connection.scalar(text("SELECT row_security_active('messages')"))
    except Exception as error:
        return fail(f"row-level security: a member's transaction fails as {who}: {_why(error)}")
    finally:
        await connection.rollback()
    if bound and held:
        return ok(f"row-level security: on; the policies bind {who}, an ordinary role")
    fix = f"connect as an ordinary role that owns the tables ({MANAGED})"
    if bound:
        return warn(
            f"row-level security: {who} is a superuser or BYPASSRLS and passes every policy "
            "by; only the switch to companion_member walls a member's transaction in, and a "
            f"transaction that resets its role sees every member: {fix}"
        )
    return warn(
        f"row-level security: off: {who} is a superuser or BYPASSRLS, and the role "
        f"companion_member is missing or not granted to it: {fix}"
    )


async def _record(connection: AsyncConnection) -> Result:
    """Is the member a transaction entered recorded where the app's role cannot write?"""
    if await wall.installed(connection):
        return ok("the wall's record: kept by companion_wall; no SQL moves a member's transaction")
    who = await connection.scalar(text("SELECT current_user"))
    return warn(
        f"the wall's record: not installed: SQL running as {who} inside a member's "
        "transaction could point it at another member (set_config); a superuser runs the "
        "SQL that `python -m bot.wall` prints, once, in this database"
    )


async def check_wall(url: str, schema: str | None) -> list[Result]:
    engine = make_engine(url, schema, pool_size=1)
    try:
        async with engine.connect() as connection:
            results = [await _wall(connection)]
            if results[0].level == "ok" and "set up with the tables" not in results[0].text:
                results.append(await _record(connection))
            return results
    finally:
        await engine.dispose()


def _where(settings: Settings) -> str:
    if not settings.database_url:
        return f"the embedded database in {settings.data_dir}"
    try:
        url = make_url(asyncpg_url(settings.database_url))
    except CompanionError:
        return "DATABASE_URL"
    host = url.host or url.query.get("host") or "localhost"  # or a Unix socket directory
    return f"{host}:{url.port or 5432}/{url.database or ''}"


async def check_database(settings: Settings) -> list[Result]:
    where = _where(settings)
    fix = (
        "is the server running, and are the host, user and password in DATABASE_URL right?"
        if settings.database_url
        else "is COMPANION_DATA_DIR writable?"
    )
    try:
        async with asyncio.timeout(TIMEOUT * 2):  # the embedded server may have to start
            async with database_server(
                settings.database_url, settings.data_dir, keep_warm=idle_stop.may_outlive()
            ) as url:
                engine = make_engine(url, settings.db_schema, pool_size=1)
                try:
                    async with engine.connect() as connection:
                        server = await connection.scalar(text("SHOW server_version"))
                        results = [ok(f"database: PostgreSQL {server} at {where}")]
                        results += await _schema_checks(connection, settings)
                finally:
                    await engine.dispose()
                if not all(r.ok for r in results):
                    return results  # the wall is probed on a migrated database only
                # The embedded database is served as its ordinary role, not its superuser.
                served = url if settings.database_url else as_role(url, APP_ROLE)
                return results + await check_wall(served, settings.db_schema)
    except TimeoutError:
        return [fail(f"database: {where} did not answer within {TIMEOUT * 2:g} s; {fix}")]
    except Exception as error:
        return [fail(f"database: cannot use {where} ({_why(error)}); {fix}")]
