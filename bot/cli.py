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
    companion tick [--now ISO-8601 [--apply]] [--dry-run]
    companion usage [--tenant T] [--days N]
    companion doctor
    companion eval TASK --data PATH [--judge-model M] [--output FILE]

Errors a person can fix are one line on stderr and exit status 2, never a traceback.

This module is the command line's words alone: `--help`, `--version` and a wrong argument
are answered before the model client, the database layer or the embedder is imported. What
each command does is `bot.commands`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import os
import sys
from pathlib import Path
from typing import Any

from core.tenant_key import MAX_ID_CHARS

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
    from importlib import metadata  # for --version only: its import is a tenth of a second

    try:
        return metadata.version("companion")
    except metadata.PackageNotFoundError:
        return "unknown"


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(f"companion {_version()}\n")
        parser.exit()


MAX_DIMENSION = 4000  # pgvector's halfvec, in which vectors are stored, holds up to 4,000


def _name(kind: str) -> Any:
    """A tenant or user id as typed: refused when blank or padded with spaces, which would
    name a member or community nobody can reach from a platform."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"a {kind} id cannot be empty")
        if text != text.strip() or not text.isprintable():
            raise argparse.ArgumentTypeError(
                f"a {kind} id has no spaces around it nor control characters: {text!r}"
            )
        if len(text) > MAX_ID_CHARS:
            raise argparse.ArgumentTypeError(
                f"a {kind} id has at most {MAX_ID_CHARS} characters, not {len(text):,}"
            )
        return text

    return parse


def _dimension(text: str) -> int:
    try:
        dim = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= dim <= MAX_DIMENSION:
        raise argparse.ArgumentTypeError(
            f"an embedding dimension is between 1 and {MAX_DIMENSION:,}, not {dim}"
        )
    return dim


TENANT, USER = _name("tenant"), _name("user")
# The terminal's community: no platform's (its key names none), so no platform delivers to
# it; its members read what waited (openers) at their next chat.
TERMINAL_TENANT = "local"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="companion",
        description="Companion: every community member gets their own agent with long-term "
        "memory (MemGPT), on Discord, Slack and the terminal.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback when something fails"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    chat = commands.add_parser("chat", help="chat with a member's agent in the terminal")
    chat.add_argument(
        "--tenant",
        type=TENANT,
        default=TERMINAL_TENANT,
        help=f"default: {TERMINAL_TENANT} (the terminal)",
    )
    chat.add_argument("--user", type=USER, default=None, help="default: your login name")
    chat.add_argument("--verbose", "-v", action="store_true", help="show thoughts and calls")

    export = commands.add_parser("export", help="print a member's whole memory as JSON")
    export.add_argument(
        "--tenant", type=TENANT, required=True, help="e.g. local, discord:<guild id>"
    )
    export.add_argument("--user", type=USER, required=True, help="the platform user id")
    export.add_argument("--output", "-o", help="write to this file instead of stdout")

    restore = commands.add_parser("import", help="restore an export")
    restore.add_argument("file", help="an export file, or - for stdin")
    restore.add_argument(
        "--tenant", type=TENANT, help="restore into this tenant (default: the export's)"
    )
    restore.add_argument(
        "--user", type=USER, help="restore into this member (default: the export's)"
    )
    restore.add_argument("--replace", action="store_true", help="replace existing memory")

    reset = commands.add_parser("reset", help="erase a member's memory, all of it")
    reset.add_argument("--tenant", type=TENANT, required=True, help="e.g. local, slack:<team id>")
    reset.add_argument("--user", type=USER, required=True, help="the platform user id")
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    tenant = commands.add_parser("tenant", help="a whole community (tenant)")
    tenant_cmd = tenant.add_subparsers(dest="tenant_command", required=True, metavar="erase")
    erase = tenant_cmd.add_parser("erase", help="erase every member's memory in a community")
    erase.add_argument("tenant", type=TENANT, help="e.g. slack:<team id>, discord:<guild id>")
    erase.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    commands.add_parser(
        "migrate",
        help="bring the database to this version's schema, revision by revision (deploys "
        "run it once before starting; other commands refuse a revision that rewrites tables)",
    )
    commands.add_parser("run", help="serve Discord and/or Slack, with the scheduler")
    commands.add_parser("web", help="serve the memory inspector (and health checks) alone")

    link = commands.add_parser("link", help="print a sign-in link to the memory inspector")
    link.add_argument("--tenant", type=TENANT, required=True)
    whom = link.add_mutually_exclusive_group(required=True)
    whom.add_argument("--user", type=USER, help="a member: the link opens their own memory")
    whom.add_argument("--admin", action="store_true", help="an admin of the tenant")

    openers = commands.add_parser("openers", help="scheduled conversation openers")
    openers_cmd = openers.add_subparsers(dest="openers_command", required=True, metavar="list")
    listing = openers_cmd.add_parser("list", help="what is scheduled and why")
    listing.add_argument("--due", action="store_true", help="only what is due now")
    listing.add_argument("--now", help="as if at this ISO-8601 time")

    tick_cmd = commands.add_parser(
        "tick",
        help="run one scheduler pass (with --now: only say what it would do)",
        description="One scheduler pass: the openers and upkeep that are due run and openers "
        "are delivered. With --now T it is a dry run: it prints what would be due at T and "
        "changes nothing (no model call, no message, the schedule as it was), unless --apply.",
    )
    tick_cmd.add_argument(
        "--now", help="as if at this ISO-8601 time (default: now); a dry run unless --apply"
    )
    tick_cmd.add_argument(
        "--apply",
        action="store_true",
        help="with --now: really run the pass at that time (moves the schedule for good)",
    )
    tick_cmd.add_argument(
        "--dry-run", action="store_true", help="only say what is due; change nothing"
    )

    usage = commands.add_parser(
        "usage", help="tokens and estimated cost per tenant, member and day (UTC)"
    )
    usage.add_argument("--tenant", type=TENANT, help="only this tenant, e.g. slack:<team id>")
    usage.add_argument("--days", type=int, default=7, help="today and the days before (7)")

    commands.add_parser(
        "doctor", help="check the database, model endpoint and platform tokens; say what is wrong"
    )

    reembed_cmd = commands.add_parser(
        "reembed", help="recompute the embeddings of archival memory and past messages"
    )
    reembed_cmd.add_argument(
        "--dim", type=_dimension, help=f"new embedding dimension (1 to {MAX_DIMENSION:,})"
    )
    reembed_cmd.add_argument("--missing", action="store_true", help="only rows without one")
    _eval_parser(commands)
    return parser


EVAL_TASKS = ("locomo-recall", "locomo-qa", "dmr", "nested-kv", "openers")


def _levels(text: str) -> list[int]:
    try:
        return [int(level) for level in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None


def _count(text: str) -> int:
    """--limit, --sessions: 1 or more (0 was read as not given, -1 as "all but the last")."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"1 or more, not {count}")
    return count


def _eval_parser(commands: Any) -> None:
    cmd = commands.add_parser(
        "eval",
        help="measure memory on the MemGPT paper's tasks (a throwaway schema; JSON report)",
        description="`companion eval TASK`: one task against the configured endpoint, in a "
        "throwaway schema.",
    )
    cmd.add_argument("task", choices=EVAL_TASKS)
    cmd.add_argument("--data", type=Path, required=True, help="LoCoMo JSON file, or nested_kv/")
    cmd.add_argument("--conversations", help='LoCoMo conversations by position: "0-4", "5,7"')
    cmd.add_argument("--limit", type=_count, help="questions per conversation / samples per level")
    cmd.add_argument("--sessions", type=_count, help="dmr: sessions imported (5); openers: (3)")
    cmd.add_argument(
        "--levels", type=_levels, default="1,2,3,4,5,6", help="nested-kv nesting levels"
    )
    cmd.add_argument("--judge-model", help="the judging model (default: COMPANION_MODEL)")
    cmd.add_argument("--output", type=Path, help="the JSON report (default eval-TASK.json)")
    cmd.add_argument("--keep", action="store_true", help="keep the schema afterwards")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from bot.commands import execute  # what the words mean: the heavy imports start here

    # Python's last garbage collections, as the process exits, walk every object the
    # command's imports made (SQLAlchemy's, the ORM's, openai's...): 0.1-0.5 s after the
    # last line, more on a busy machine. Frozen, they are left to the operating system;
    # exit handlers and flushes still run. Registered once, however often main runs.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    try:
        return execute(args)
    except BrokenPipeError:  # stdout's reader left (`companion export … | head`): not "the
        # database failed", as an OSError is said; quiet, as a pipe's writer is, and stdout
        # pointed elsewhere so that its flush at exit does not fail again.
        with contextlib.suppress(OSError, ValueError):  # a stdout with no file (a test's)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
