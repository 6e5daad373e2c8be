"""What each `companion` command does (its words are `bot.cli`).

`execute(args)` opens the app for the command, runs it and turns what went wrong into one
line on stderr: exit 2 for a mistake a person can fix (`CompanionError`), 1 for anything
else (`--debug` shows its traceback), 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import idle_stop
from bot.export_files import read_export, write_whole
from bot.log_filters import redact
from bot.observability import configure_logging, log_options
from bot.progress import Starting
from bot.settings import Settings
from core.errors import AgentNotFound, CompanionError, ConfigError

if TYPE_CHECKING:
    from bot.app import App

# Each command imports what only it needs when it runs (the servers, the doctor, the eval,
# the terminal chat...): a command starts with its own imports, not every command's.


async def _chat(app: App, args: argparse.Namespace) -> int:
    from bot.chat import banner, run_chat

    user = args.user or getpass.getuser()
    if sys.stdin.isatty():  # interactive: the banner (erasing the "starting" line) first
        sys.stdout.write(banner(args.tenant, user))
        sys.stdout.flush()
    return await run_chat(
        app.engine, app.members, args.tenant, user, args.verbose, sys.stdin, sys.stdout
    )


def _terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _operator() -> str:
    """Who runs this command, as the audit log names them."""
    return f"operator {getpass.getuser()}"


async def _export(app: App, args: argparse.Namespace) -> int:
    doc = await app.members.admin_export(args.tenant, _operator(), args.user)
    if doc is None:
        raise AgentNotFound(args.tenant, args.user)
    text = json.dumps(doc, ensure_ascii=False, indent=2)
    if args.output:
        try:
            await asyncio.to_thread(write_whole, Path(args.output), text + "\n")
        except OSError as error:
            raise ConfigError(f"cannot write {args.output}: {error.strerror}") from None
        print(
            f"exported {len(doc['messages'])} messages, {len(doc['passages'])} passages "
            f"to {args.output}",
            file=sys.stderr,
        )
    else:
        print(text)
    return 0


async def _import(app: App, args: argparse.Namespace) -> int:
    from bot.progress import Progress
    from core.members.portability import parse_export

    export = parse_export(read_export(args.file))  # checked whole before anything is written
    tenant = args.tenant or export.tenant
    user = args.user or export.user
    if not tenant or not user:
        raise ConfigError("the export names no tenant or user; pass --tenant and --user")
    counts = await app.members.admin_import(
        tenant, _operator(), user, export, args.replace, Progress("importing")
    )
    print(
        f"imported {counts['messages']} messages, {counts['passages']} passages and "
        f"{counts['blocks']} blocks into {user}@{tenant}",
        file=sys.stderr,
    )
    return 0


async def _reset(app: App, args: argparse.Namespace) -> int:
    if await app.members.view(args.tenant, args.user) is None:
        print(f"nothing to reset: no agent for {args.user}@{args.tenant}", file=sys.stderr)
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("reset erases memory for good: pass --yes to confirm")
        question = f"Erase ALL memory of {args.user} in {args.tenant}? Type yes: "
        if (await asyncio.to_thread(input, question)).strip().lower() != "yes":
            print("not reset", file=sys.stderr)
            return 1
    await app.members.admin_reset(args.tenant, _operator(), args.user)
    print(f"erased all memory of {args.user}@{args.tenant}", file=sys.stderr)
    return 0


async def _tenant(app: App, args: argparse.Namespace) -> int:
    from bot.operator import erase_tenant

    return await erase_tenant(app, args.tenant, args.yes, _operator())


async def _reembed(app: App, args: argparse.Namespace) -> int:
    from bot.progress import Progress
    from core.memory.reembed import change_dimension, held_model, reembed

    if app.embedder is None:
        raise ConfigError("COMPANION_EMBEDDING_MODEL is 'none': there is no model to embed with")
    wanted, held = app.settings.embedding_dim, app.embedding_dim
    name, made_by = app.settings.embedder_name, await held_model(app.sessions)
    progress = Progress("re-embedding passages and messages")
    if args.dim and args.dim != held:
        if args.dim != wanted:
            if app.settings.embeds_in_process:
                raise ConfigError(
                    f"{app.settings.embedder_said} gives {wanted} dimensions, not {args.dim}; "
                    "set COMPANION_EMBEDDING_MODEL for an endpoint model of another size"
                )
            raise ConfigError(f"set COMPANION_EMBEDDING_DIM={args.dim} as well")
        count = await change_dimension(
            app.sessions, app.embedder, args.dim, progress=progress, model=name
        )
        print(
            f"re-embedded {count} passages and messages at {args.dim} dimensions", file=sys.stderr
        )
        return 0
    if wanted != held:
        raise ConfigError(
            f"the database holds {held}-dimension embeddings but COMPANION_EMBEDDING_DIM is "
            f"{wanted}: run `companion reembed --dim {wanted}`, or set it back to {held}"
        )
    if made_by not in (None, name):  # another model of the same size: all of them, beside
        if args.missing:
            raise ConfigError(
                f"the stored embeddings were made by {made_by}, not {name}: run "
                "`companion reembed` (all of them)"
            )
        count = await change_dimension(
            app.sessions, app.embedder, held, progress=progress, model=name
        )
        print(f"re-embedded {count} passages and messages with {name}", file=sys.stderr)
        return 0
    count = await reembed(
        app.sessions, app.embedder, only_missing=args.missing, progress=progress, model=name
    )
    print(f"re-embedded {count} passages and messages", file=sys.stderr)
    return 0


async def _openers(app: App, args: argparse.Namespace) -> int:
    from bot.operator import list_openers, parse_now

    lines = await list_openers(app, args.due, parse_now(args.now))
    print("\n".join(lines) if lines else "no openers scheduled")
    return 0


def _dry_tick(args: argparse.Namespace) -> bool:
    """`tick --now T` only says what would happen unless `--apply`: moving the schedule to
    an imagined moment is for good, so it is never the default."""
    if args.apply and args.dry_run:
        raise ConfigError("--apply and --dry-run contradict each other: pick one")
    if args.apply and not args.now:
        raise ConfigError("--apply goes with --now (a plain `companion tick` runs for real)")
    return args.dry_run or (bool(args.now) and not args.apply)


async def _tick(app: App, args: argparse.Namespace) -> int:
    from bot.operator import preview_tick, run_tick

    if _dry_tick(args):
        print(await preview_tick(app, app.clock()))
    else:
        print(await run_tick(app, app.clock()))
    return 0


async def _usage(settings: Settings, args: argparse.Namespace) -> int:
    """The database alone: neither the engine nor the embedder (their imports are most of a
    second), so the report is the first line within about one."""
    from bot.usage import usage_report

    async with _database(settings) as (sessions, _):
        lines = await usage_report(sessions, settings, args.tenant, args.days, datetime.now(UTC))
    print("\n".join(lines))
    return 0


async def _serve(app: App, args: argparse.Namespace) -> int:
    from bot.run import run

    return await run(app)


async def _web(app: App, args: argparse.Namespace) -> int:
    from bot.web.serve import serve_web

    return await serve_web(app)


async def _link(app: App, args: argparse.Namespace) -> int:
    if args.admin:
        url = await app.access.link(args.tenant, None, _operator())
        whom = f"an admin of {args.tenant}"
    else:
        url = await app.access.link(args.tenant, args.user, args.user)
        whom = f"{args.user}@{args.tenant}"
        if await app.members.profile(args.tenant, args.user) is None:
            print(f"note: no memory of {whom} yet", file=sys.stderr)
    print(url)
    print(
        f"signs in {whom} once, within {app.settings.link_minutes} minutes; don't share it",
        file=sys.stderr,
    )
    return 0


COMMANDS = {
    "chat": _chat,
    "run": _serve,
    "web": _web,
    "link": _link,
    "openers": _openers,
    "tick": _tick,
    "export": _export,
    "import": _import,
    "reset": _reset,
    "tenant": _tenant,
    "reembed": _reembed,
}


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "usage":
        return await _usage(settings, args)
    if args.command == "chat" and (_terminal() or not sys.stdin.isatty()):
        # What it is doing, before the imports (a new embedded database takes seconds); piped,
        # on stderr and only on a terminal, erased by the first reply (bot.progress.Starting)
        stream = sys.stdout if sys.stdin.isatty() else sys.stderr
        Starting(stream, "starting Companion (database, model)...")
    if args.command == "web":  # as above: the database and the pages take most of a second
        said = f"starting the memory inspector on {settings.http_host}:{settings.http_port}"
        logging.getLogger("bot.web.serve").info("%s (database, pages)...", said)
    from bot.app import open_app

    need_model = args.command in ("chat", "run") or (args.command == "tick" and not _dry_tick(args))
    if args.command == "run":
        settings.require_platform()
    if args.command == "chat":  # the rate limit guards a community, not its operator
        settings = replace(settings, rate_limit=None)
    clock = None
    if args.command == "tick" and args.now:
        from bot.operator import parse_now

        moment = parse_now(args.now)
        clock = lambda: moment  # noqa: E731  (the whole pass happens "at" that moment)
    async with open_app(
        settings,
        need_model=need_model,
        check_dimension=args.command != "reembed",
        clock=clock,
        keep_warm=args.command not in ("run", "web") and idle_stop.may_outlive(),
        # On a terminal the prompt and first reply first (the model loads while the member
        # types); piped, the catch-up runs beside the first turn (bench/README.md).
        hold_catch_up=args.command == "chat" and sys.stdin.isatty(),
    ) as app:
        return await COMMANDS[args.command](app, args)


def execute(args: argparse.Namespace) -> int:
    """Run the parsed command; the exit status (0 done, 1 failed, 2 a mistake to fix)."""
    if args.command == "doctor":
        return _doctor()
    try:
        configure_logging(*log_options(os.environ, args.command))
        settings = Settings.from_env(os.environ)
        if args.command == "migrate":
            return asyncio.run(_migrate(settings))
        if args.command == "eval":
            from bot.eval.runner import run_eval

            return asyncio.run(run_eval(settings, args))
        return asyncio.run(_run(args, settings))
    except CompanionError as error:
        print(f"companion: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if args.debug or isinstance(error, BrokenPipeError):  # bot/cli.py says it (nothing)
            raise
        print(f"companion: {failure_line(error)}", file=sys.stderr)
        return 1


async def _migrate(settings: Settings) -> int:
    """`companion migrate`: a line per revision as it is applied, and one last line."""
    from sqlalchemy import text

    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        print(line, flush=True)

    started = time.monotonic()
    async with _database(
        settings,
        rewrite_tables=True,
        progress=say,
    ) as (sessions, _):
        async with sessions() as session:
            at = ", ".join(await session.scalars(text("SELECT version_num FROM alembic_version")))
    applied = sum(line.startswith("applied ") for line in said)
    if applied:
        print(
            f"migrated: the database is at {at} ({applied} applied in "
            f"{time.monotonic() - started:.1f} s)"
        )
    else:
        print(f"the database is at {at}, the newest revision: nothing to migrate")
    return 0


def _database(settings: Settings, **extra: Any) -> Any:
    """The configured database alone, without the engine (for commands that need no more);
    the embedded server kept warm for the next command where that is allowed."""
    from bot.database import open_database

    return open_database(
        settings.database_url,
        settings.data_dir,
        settings.embedding_dim,
        settings.db_schema,
        keep_warm=idle_stop.may_outlive(),
        **extra,
    )


def failure_line(error: BaseException) -> str:
    """An unexpected failure as one line: what happened, and how to see more."""
    exc = sys.modules.get("sqlalchemy.exc")  # not imported yet: not a database error
    if isinstance(error, OSError) or (exc and isinstance(error, exc.DBAPIError)):
        cause = getattr(error, "orig", None) or error
        words = str(cause).strip().splitlines()
        what = f"{type(cause).__name__}: {words[0] if words else 'no details'}"
        return redact(
            f"the database failed ({what}); is it running, and is DATABASE_URL right? "
            "`companion doctor` checks it"
        )
    return redact(
        f"unexpected {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        " (run with --debug for the traceback)"
    )


def _doctor() -> int:
    """Every finding is a line on stdout (bad log settings too); exit 0 or 1."""
    try:
        configure_logging(*log_options(os.environ, "doctor"))
    except ConfigError:
        configure_logging(logging.WARNING, json=False)
    from bot.doctor import run_doctor

    try:
        return asyncio.run(run_doctor(os.environ, sys.stdout))
    except KeyboardInterrupt:
        return 130
