"""The `companion` command.

    companion chat [--tenant T] [--user U] [--verbose]
    companion export --tenant T --user U [--output FILE]
    companion import FILE [--tenant T --user U] [--replace]
    companion reset --tenant T --user U [--yes]
    companion tenant erase TENANT [--yes]
    companion reembed [--dim N] [--missing]
    companion run
    companion web
    companion link --tenant T (--user U | --admin)
    companion openers list [--due]
    companion tick [--now ISO-8601]
    companion usage [--tenant T] [--days N]
    companion doctor
    companion eval TASK --data PATH [--judge-model M] [--output FILE]

Errors a person can fix are one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from bot.app import App, open_app
from bot.chat import run_chat
from bot.doctor import run_doctor
from bot.eval.runner import add_parser as add_eval_parser
from bot.eval.runner import run_eval
from bot.observability import configure_logging, log_options, redact
from bot.operator import erase_tenant, list_openers, parse_now, run_tick
from bot.progress import Progress
from bot.run import run
from bot.settings import Settings
from bot.usage import usage_report
from bot.web.serve import serve_web
from core.errors import AgentNotFound, BadExport, CompanionError, ConfigError
from core.members.portability import parse_export
from core.members.reembed import change_dimension, reembed

EPILOG = """\
The model and database come from the environment (OPENAI_API_KEY or OPENAI_BASE_URL,
COMPANION_MODEL, DATABASE_URL; unset: an embedded database). See the README's Configuration.

examples:
  companion chat                                   talk to your own agent
  companion doctor                                 check a deployment before `run`
  companion export --tenant slack:T012 --user U34 -o ana.json
  companion openers list --due
  companion eval locomo-recall --data locomo10.json  memory quality on the paper's tasks
  companion usage --days 30                        tokens and estimated cost per member
"""


def _version() -> str:
    try:
        return metadata.version("companion")
    except metadata.PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="companion",
        description="Companion: every community member gets their own agent with long-term "
        "memory (MemGPT), on Discord, Slack and the terminal.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"companion {_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback when something fails"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    chat = commands.add_parser("chat", help="chat with a member's agent in the terminal")
    chat.add_argument("--tenant", default="local", help="default: local (the terminal)")
    chat.add_argument("--user", default=None, help="default: your login name")
    chat.add_argument("--verbose", "-v", action="store_true", help="show thoughts and calls")

    export = commands.add_parser("export", help="print a member's whole memory as JSON")
    export.add_argument("--tenant", required=True, help="e.g. local, discord:<guild id>")
    export.add_argument("--user", required=True, help="the platform user id")
    export.add_argument("--output", "-o", help="write to this file instead of stdout")

    restore = commands.add_parser("import", help="restore an export")
    restore.add_argument("file", help="an export file, or - for stdin")
    restore.add_argument("--tenant", help="restore into this tenant (default: the export's)")
    restore.add_argument("--user", help="restore into this member (default: the export's)")
    restore.add_argument("--replace", action="store_true", help="replace existing memory")

    reset = commands.add_parser("reset", help="erase a member's memory, all of it")
    reset.add_argument("--tenant", required=True, help="e.g. local, slack:<team id>")
    reset.add_argument("--user", required=True, help="the platform user id")
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    tenant = commands.add_parser("tenant", help="a whole community (tenant)")
    tenant_cmd = tenant.add_subparsers(dest="tenant_command", required=True, metavar="erase")
    erase = tenant_cmd.add_parser("erase", help="erase every member's memory in a community")
    erase.add_argument("tenant", help="e.g. slack:<team id>, discord:<guild id>")
    erase.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    commands.add_parser("run", help="serve Discord and/or Slack, with the scheduler")
    commands.add_parser("web", help="serve the memory inspector (and health checks) alone")

    link = commands.add_parser("link", help="print a sign-in link to the memory inspector")
    link.add_argument("--tenant", required=True)
    whom = link.add_mutually_exclusive_group(required=True)
    whom.add_argument("--user", help="a member: the link opens their own memory")
    whom.add_argument("--admin", action="store_true", help="an admin of the tenant")

    openers = commands.add_parser("openers", help="scheduled conversation openers")
    openers_cmd = openers.add_subparsers(dest="openers_command", required=True, metavar="list")
    listing = openers_cmd.add_parser("list", help="what is scheduled and why")
    listing.add_argument("--due", action="store_true", help="only what is due now")
    listing.add_argument("--now", help="as if at this ISO-8601 time")

    tick_cmd = commands.add_parser("tick", help="run one scheduler pass")
    tick_cmd.add_argument("--now", help="as if at this ISO-8601 time (default: now)")

    usage = commands.add_parser(
        "usage", help="tokens and estimated cost per tenant, member and day (UTC)"
    )
    usage.add_argument("--tenant", help="only this tenant, e.g. slack:<team id>")
    usage.add_argument("--days", type=int, default=7, help="today and the days before (7)")

    commands.add_parser(
        "doctor", help="check the database, model endpoint and platform tokens; say what is wrong"
    )

    reembed_cmd = commands.add_parser(
        "reembed", help="recompute the embeddings of archival memory and past messages"
    )
    reembed_cmd.add_argument("--dim", type=int, help="new embedding dimension")
    reembed_cmd.add_argument("--missing", action="store_true", help="only rows without one")
    add_eval_parser(commands)
    return parser


async def _chat(app: App, args: argparse.Namespace) -> int:
    user = args.user or getpass.getuser()
    await run_chat(app.engine, app.members, args.tenant, user, args.verbose, sys.stdin, sys.stdout)
    return 0


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
            await asyncio.to_thread(Path(args.output).write_text, text + "\n", encoding="utf-8")
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


def _read_export(path: str) -> Any:
    try:
        raw = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        return json.loads(raw)
    except OSError as error:
        raise BadExport(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadExport(f"{path} is not valid JSON: {error}") from None
    except (RecursionError, ValueError):
        raise BadExport(
            f"{path} is not JSON I can read: nested too deeply or numbers too large"
        ) from None


async def _import(app: App, args: argparse.Namespace) -> int:
    export = parse_export(_read_export(args.file))  # checked whole before anything is written
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
    return await erase_tenant(app, args.tenant, args.yes, _operator())


async def _reembed(app: App, args: argparse.Namespace) -> int:
    if app.embedder is None:
        raise ConfigError("COMPANION_EMBEDDING_MODEL is 'none': there is no model to embed with")
    wanted, held = app.settings.embedding_dim, app.embedding_dim
    progress = Progress("re-embedding passages and messages")
    if args.dim and args.dim != held:
        if args.dim != wanted:
            if app.settings.embedding_model is None:
                raise ConfigError(
                    f"the local embedding model gives {wanted} dimensions, not {args.dim}; "
                    "set COMPANION_EMBEDDING_MODEL for an endpoint model of another size"
                )
            raise ConfigError(f"set COMPANION_EMBEDDING_DIM={args.dim} as well")
        count = await change_dimension(app.sessions, app.embedder, args.dim, progress=progress)
        print(
            f"re-embedded {count} passages and messages at {args.dim} dimensions", file=sys.stderr
        )
        return 0
    if wanted != held:
        raise ConfigError(
            f"the database holds {held}-dimension embeddings but COMPANION_EMBEDDING_DIM is "
            f"{wanted}: run `companion reembed --dim {wanted}`, or set it back to {held}"
        )
    count = await reembed(app.sessions, app.embedder, only_missing=args.missing, progress=progress)
    print(f"re-embedded {count} passages and messages", file=sys.stderr)
    return 0


async def _openers(app: App, args: argparse.Namespace) -> int:
    lines = await list_openers(app, args.due, parse_now(args.now))
    print("\n".join(lines) if lines else "no openers scheduled")
    return 0


async def _tick(app: App, args: argparse.Namespace) -> int:
    print(await run_tick(app, app.engine.clock()))
    return 0


async def _usage(app: App, args: argparse.Namespace) -> int:
    print("\n".join(await usage_report(app, args.tenant, args.days, app.engine.clock())))
    return 0


async def _serve(app: App, args: argparse.Namespace) -> int:
    return await run(app)


async def _web(app: App, args: argparse.Namespace) -> int:
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
    "usage": _usage,
}


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    need_model = args.command in ("chat", "run", "tick")
    if args.command == "run":
        settings.require_platform()
    if args.command == "chat":  # the rate limit guards a community, not its operator
        settings = replace(settings, rate_limit=None)
    if args.command == "chat" and sys.stdin.isatty() and sys.stdout.isatty():
        # The embedded database can take a few seconds to start the first time.
        sys.stdout.write("\033[2mstarting Companion (database, model)...\033[0m\r")
        sys.stdout.flush()
    clock = None
    if args.command == "tick" and args.now:
        moment = parse_now(args.now)
        clock = lambda: moment  # noqa: E731  (the whole pass happens "at" that moment)
    async with open_app(
        settings,
        need_model=need_model,
        check_dimension=args.command != "reembed",
        clock=clock,
    ) as app:
        return await COMMANDS[args.command](app, args)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        return _doctor()
    try:
        configure_logging(*log_options(os.environ, args.command))
        settings = Settings.from_env(os.environ)
        if args.command == "eval":
            return asyncio.run(run_eval(settings, args))
        return asyncio.run(_run(args, settings))
    except CompanionError as error:
        print(f"companion: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if args.debug:
            raise
        print(f"companion: {failure_line(error)}", file=sys.stderr)
        return 1


def failure_line(error: BaseException) -> str:
    """An unexpected failure as one line: what happened, and how to see more."""
    if isinstance(error, DBAPIError | OSError):
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
    try:
        return asyncio.run(run_doctor(os.environ, sys.stdout))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
