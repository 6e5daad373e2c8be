"""`companion doctor`: check what a deployment needs and say plainly what is wrong.

    settings   the environment parses
    database   reachable (embedded or DATABASE_URL), migrations at head
    pgvector   the extension's version, the embedding dimension recorded in `meta`
    row-level security   a member's transaction, probed as Companion serves the database:
               the policies bind it, also after a `RESET ROLE`
    model      a one-token chat completion; the embedding model and its dimension, when set
    Slack      auth.test with SLACK_BOT_TOKEN; the Socket Mode token or HTTP-mode secret
    Discord    GET /users/@me with DISCORD_TOKEN; the privileged intents the bot needs

Each check prints one line, `ok  …`, `warn …` (works, but weaker than it should be) or
`FAIL …`, with what to do about it. Nothing is changed anywhere (no migrations, no
messages; probes roll back). Exit status 0 when no check fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

import aiohttp
import openai
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.database import (
    ADMIN_SQL,
    APP_ROLE,
    MANAGED,
    MIGRATIONS,
    as_role,
    asyncpg_url,
    database_server,
    make_engine,
)
from bot.observability import log_options, redact
from bot.settings import Settings
from core.errors import CompanionError

TIMEOUT = 15.0
OPENAI_URL = "https://api.openai.com/v1"
SLACK_URL = "https://slack.com/api/"


@dataclass(frozen=True)
class Result:
    level: str  # ok | warn | FAIL
    text: str

    @property
    def ok(self) -> bool:
        return self.level != "FAIL"

    def line(self) -> str:
        return f"{self.level:<4} {self.text}"


def ok(text: str) -> Result:
    return Result("ok", text)


def warn(text: str) -> Result:
    return Result("warn", text)


def fail(text: str) -> Result:
    return Result("FAIL", text)


def _why(error: BaseException) -> str:
    """An error in one short line, without the driver's wrapping or any secret."""
    error = getattr(error, "orig", None) or error  # SQLAlchemy wraps the driver's error
    words = str(error).strip().splitlines()
    return redact(f"{type(error).__name__}: {words[0] if words else 'no details'}")


# --- database --------------------------------------------------------------------------------


def _migrations(connection: Connection) -> tuple[set[str], set[str], set[str]]:
    """(revisions the database is at, the newest revisions in migrations/, all of them)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    scripts = ScriptDirectory.from_config(config)
    newest = set(scripts.get_heads())
    known = {script.revision for script in scripts.walk_revisions()}
    return set(MigrationContext.configure(connection).get_current_heads()), newest, known


async def _missing_vector(connection: AsyncConnection) -> str:
    """Why pgvector is not in this database, and who can fix it."""
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
        return (
            "pgvector: not installed on this PostgreSQL server; install pgvector "
            "(https://github.com/pgvector/pgvector) or leave DATABASE_URL unset to use "
            "the embedded database"
        )
    if creatable:
        return "pgvector: available but not created yet; `companion run` creates it on start"
    return (
        f"pgvector: not created in database {database}, and this user may not create it; an "
        f"admin runs once, connected to {database}: {ADMIN_SQL} ({MANAGED})"
    )


async def _schema_checks(connection: AsyncConnection, settings: Settings) -> list[Result]:
    results = []
    current, newest, known = await connection.run_sync(_migrations)
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
        results.append(
            ok(f"database migrations: at {at}; the next companion command migrates it to {head}")
        )
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
        results.append(fail(await _missing_vector(connection)))
        return results
    held = None
    if await connection.scalar(text("SELECT to_regclass('meta') IS NOT NULL")):
        held = await connection.scalar(text("SELECT value FROM meta WHERE key = 'embedding_dim'"))
    if held is None or int(held) == settings.embedding_dim:
        results.append(ok(f"pgvector {version}; embeddings of {settings.embedding_dim} dimensions"))
    else:
        results.append(
            fail(
                f"pgvector {version}; the database holds {held}-dimension embeddings but "
                f"COMPANION_EMBEDDING_DIM is {settings.embedding_dim}: set it back to {held}, "
                f"or run `companion reembed --dim {settings.embedding_dim}`"
            )
        )
    return results


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


async def check_wall(url: str, schema: str | None) -> list[Result]:
    engine = make_engine(url, schema, pool_size=1)
    try:
        async with engine.connect() as connection:
            return [await _wall(connection)]
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
            async with database_server(settings.database_url, settings.data_dir) as url:
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


# --- model -----------------------------------------------------------------------------------


def _model_problem(error: Exception, where: str, model: str, what: str) -> str:
    if isinstance(error, openai.APITimeoutError):
        return f"{what}: {where} did not answer within {TIMEOUT:g} s; is the server up?"
    if isinstance(error, openai.APIConnectionError):
        return (
            f"{what}: cannot connect to {where}; is the server running and OPENAI_BASE_URL right?"
        )
    if isinstance(error, openai.AuthenticationError | openai.PermissionDeniedError):
        return f"{what}: {where} refused OPENAI_API_KEY (HTTP {error.status_code}); set a valid key"
    if isinstance(error, openai.NotFoundError):
        return (
            f"{what}: {where} has no model {model!r} (HTTP 404); check the model name, and "
            "that OPENAI_BASE_URL ends where the API starts (often /v1)"
        )
    if isinstance(error, openai.APIStatusError):
        return f"{what}: {where} answered HTTP {error.status_code}: {redact(error.message[:200])}"
    return f"{what}: {where} gave an answer that is not OpenAI-compatible ({_why(error)})"


async def check_model(settings: Settings) -> list[Result]:
    try:
        settings.require_model()
    except CompanionError as error:
        return [fail(f"model: {error}")]
    model, where = settings.model or "", settings.openai_base_url or OPENAI_URL
    client = openai.AsyncOpenAI(
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key or "not-needed",
        timeout=min(settings.model_timeout, TIMEOUT),
        max_retries=0,
    )
    async with client:
        try:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Say ok."}], max_tokens=1
            )
            results = [ok(f"model: {model} answers at {where}")]
        except Exception as error:
            results = [fail(_model_problem(error, where, model, "model"))]
        if settings.embedding_model:
            results.append(await _check_embeddings(client, settings, where))
    return results


async def _check_embeddings(client: openai.AsyncOpenAI, settings: Settings, where: str) -> Result:
    model, dim = settings.embedding_model or "", settings.embedding_dim
    try:
        response = await client.embeddings.create(model=model, input=["ok"])
        size = len(response.data[0].embedding)
    except Exception as error:
        return fail(_model_problem(error, where, model, "embedding model"))
    if size != dim:
        return fail(
            f"embedding model: {model} returns {size} dimensions but COMPANION_EMBEDDING_DIM is "
            f"{dim}; set COMPANION_EMBEDDING_DIM={size} and run `companion reembed --dim {size}`"
        )
    return ok(f"embedding model: {model} returns {size} dimensions")


# --- platforms -------------------------------------------------------------------------------


async def check_platforms(settings: Settings) -> list[Result]:
    if not settings.slack_bot_token and not settings.discord_token:
        return [
            ok(
                "platforms: none configured: `companion chat` works; `companion run` needs "
                "DISCORD_TOKEN and/or SLACK_BOT_TOKEN (see README: Configuration)"
            )
        ]
    return await check_slack(settings) + await check_discord(settings)


async def check_slack(settings: Settings) -> list[Result]:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    token = settings.slack_bot_token
    if not token:
        return []
    where = settings.slack_api_url or SLACK_URL
    client = AsyncWebClient(token=token, base_url=where, timeout=int(TIMEOUT))
    try:
        answer = await client.auth_test()
        results = [ok(f"Slack: signed in as {answer.get('user')} in team {answer.get('team_id')}")]
    except SlackApiError as error:
        results = [
            fail(
                f"Slack: SLACK_BOT_TOKEN was refused ({error.response.get('error')}); copy the "
                "Bot User OAuth Token (xoxb-…) from your app's OAuth & Permissions page"
            )
        ]
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        results = [fail(f"Slack: cannot reach {where} ({_why(error)}); check SLACK_API_URL")]
    if settings.slack_app_token:
        results.append(
            ok("Slack: Socket Mode (SLACK_APP_TOKEN)")
            if settings.slack_app_token.startswith("xapp-")
            else fail(
                "Slack: SLACK_APP_TOKEN must start with xapp-: an app-level token with "
                "connections:write, from your app's Basic Information page"
            )
        )
    elif settings.slack_signing_secret:
        results.append(
            ok(f"Slack: HTTP mode, events at port {settings.http_port} path /slack/events")
        )
    else:
        results.append(
            fail(
                "Slack: set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode, "
                "from your app's Basic Information page)"
            )
        )
    return results


async def check_discord(settings: Settings) -> list[Result]:
    import discord

    token = settings.discord_token
    if not token:
        return []
    from adapters.discord import use_discord_hosts

    use_discord_hosts(settings.discord_api_url)
    where = discord.http.Route.BASE
    client = discord.Client(intents=discord.Intents(guilds=True))  # REST only: no gateway
    try:
        async with asyncio.timeout(TIMEOUT):
            await client.login(token)
        results = [ok(f"Discord: signed in as {client.user}")]
        flags = client.application.flags if client.application else discord.ApplicationFlags()
        for needed, intent, flag in (
            ("Message Content Intent", "message contents", "gateway_message_content"),
            ("Server Members Intent", "member joins", "gateway_guild_members"),
        ):
            if not (getattr(flags, flag) or getattr(flags, f"{flag}_limited")):
                results.append(
                    fail(
                        f"Discord: the bot cannot see {intent}; turn on {needed} under Bot "
                        "in the Discord Developer Portal"
                    )
                )
        return results
    except discord.LoginFailure:
        return [
            fail(
                "Discord: DISCORD_TOKEN was refused; reset the token under Bot in the Discord "
                "Developer Portal and set the new one"
            )
        ]
    except discord.HTTPException as error:
        return [fail(f"Discord: {where} answered HTTP {error.status}: {redact(error.text)}")]
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        return [fail(f"Discord: cannot reach {where} ({_why(error)}); check DISCORD_API_URL")]
    finally:
        await client.close()


# --- the command -----------------------------------------------------------------------------

CHECKS: list[Callable[[Settings], Awaitable[list[Result]]]] = [
    check_database,
    check_model,
    check_platforms,
]


def check_settings(env: Mapping[str, str]) -> tuple[Settings | None, Result]:
    try:
        settings = Settings.from_env(env)
        log_options(env, "run")
    except CompanionError as error:
        return None, fail(f"settings: {error}")
    return settings, ok("settings: the environment parses")


async def run_doctor(env: Mapping[str, str], out: TextIO) -> int:
    """Print one line per check; 0 when all pass, 1 otherwise."""
    settings, result = check_settings(env)
    print(result.line(), file=out, flush=True)
    if settings is None:
        return 1
    results = [result]
    for check in CHECKS:
        try:
            found = await check(settings)
        except Exception as error:  # a check that broke is a finding too, never a traceback
            found = [fail(f"{check.__name__.removeprefix('check_')}: {_why(error)}")]
        for result in found:
            print(result.line(), file=out, flush=True)
        results += found
    return 0 if all(r.ok for r in results) else 1
