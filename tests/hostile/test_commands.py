"""Hostile commands: the CLI (in this process and as real processes), Slack's /companion and
Discord's slash commands and buttons. A wrong command gets one clear line, changes nothing,
creates no member, and only admin actions are audited.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.common import FORGET_ASK, NOT_ADMIN, NOTHING_YET, SORRY
from adapters.discord.posting import DISCORD_LIMIT
from adapters.slack.commands import RESET
from tests.conftest import COMPANION, ROOT, Run, cli_env, run_cli
from tests.fake_discord import MANAGE_GUILD, snowflake, subcommand, user
from tests.hostile import files
from tests.hostile.common import (
    DISCORD_TENANT,
    MOD,
    SLACK_TENANT,
    Bug,
    assert_one_line,
    audit_count,
    bug_marks,
    case,
    scope_of,
    slack_uid,
    user_count,
)

STRING, USER, BOOLEAN = 3, 6, 5  # Discord's option types

# =============================================================================================
# Commands: the CLI
# =============================================================================================


PARSE_ERRORS = {
    "no-arguments": [],
    "unknown-subcommand": ["frobnicate"],
    "unknown-option": ["chat", "--evil"],
    "export-without-user": ["export", "--tenant", "club"],
    "import-without-file": ["import"],
    "reset-without-tenant": ["reset", "--user", "bob"],
    "reembed-dim-not-a-number": ["reembed", "--dim", "lots"],
    "openers-without-action": ["openers"],
    "openers-unknown-action": ["openers", "delete-all"],
    "eval-levels-not-numbers": ["eval", "nested-kv", "--data", "kv", "--levels", "1,two"],
}


@pytest.mark.parametrize("argv", list(PARSE_ERRORS.values()), ids=list(PARSE_ERRORS))
async def test_cli_wrong_arguments(argv):
    run = await run_cli(dict(os.environ), *argv)
    assert run.code == 2 and run.out == ""
    assert "Traceback" not in run.err
    assert run.err.strip().splitlines()[-1].startswith("companion") and "error:" in run.err


HEAVY = ("openai", "sqlalchemy", "alembic", "onnxruntime", "discord", "slack_bolt")


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["export", "--tenant", "club"]])
async def test_the_words_alone_are_answered_before_anything_heavy_is_imported(argv):
    """`companion --help` and a wrong argument answer at once: no model client, database
    layer or embedder is imported to print them (they took 1.3 s when they were)."""
    probe = (
        "import sys, bot.cli\n"
        "try:\n    bot.cli.main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        f"print('imported:', *sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        probe,
        *argv,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert out.decode().splitlines()[-1] == "imported:", err.decode()


@dataclass(frozen=True)
class CliCase:
    args: tuple[str, ...]
    says: str
    file: bytes | None = None  # written to a temporary file passed as {file}


def export_doc(**changes: Any) -> bytes:
    doc: dict[str, Any] = {
        "format": "companion-export",
        "version": 1,
        "tenant": "cli",
        "user": "imported",
        "blocks": [{"label": "human", "value": "likes tea", "limit": 2000}],
        "messages": [],
        "passages": [],
        **changes,
    }
    return json.dumps(doc).encode()


NOW_MUST = "--now must be an ISO-8601 time"
CLI_CASES = {
    "tick-now-word": CliCase(("tick", "--now", "yesterday"), NOW_MUST),
    "tick-now-impossible-date": CliCase(("tick", "--now", "2026-13-45T99:99"), NOW_MUST),
    "tick-now-injection": CliCase(
        ("tick", "--now", "2026-01-01'; DROP TABLE agents; --"), NOW_MUST
    ),
    "openers-now-garbage": CliCase(("openers", "list", "--now", "../../etc/passwd"), NOW_MUST),
    # Dates Python can name whose pass cannot be computed: an overflow, or year 0 in UTC.
    "tick-now-last-second": CliCase(("tick", "--now", "9999-12-31T23:59:59"), NOW_MUST),
    "tick-now-year-zero-in-utc": CliCase(("tick", "--now", "0001-01-01T00:00+05:00"), NOW_MUST),
    "usage-days-past-64-bits": CliCase(("usage", "--days", "9" * 30), "--days"),
    "export-hostile-names": CliCase(
        ("export", "--tenant", "../../etc", "--user", "'; DROP TABLE users; --"), "no agent"
    ),
    "reset-unknown-member": CliCase(("reset", "--tenant", "cli", "--user", "nobody"), ""),
    "import-missing-file": CliCase(("import", "/nonexistent/dir/export.json"), "cannot read"),
    "import-directory": CliCase(("import", "/"), "cannot read"),
    "import-binary": CliCase(("import", "{file}"), "not valid JSON", bytes(range(256)) * 40),
    "import-a-list": CliCase(("import", "{file}"), "not a Companion export", b"[1, 2, 3]"),
    "import-wrong-version": CliCase(
        ("import", "{file}"), "version", export_doc(version="../../etc")
    ),
    "import-no-user": CliCase(("import", "{file}"), "--user", export_doc(user=None)),
    "import-deep-json": CliCase(("import", "{file}"), "JSON", files.DEEP_LIST),
    "import-bad-limit": CliCase(
        ("import", "{file}"),
        "limit",
        export_doc(blocks=[{"label": "human", "value": "x", "limit": "lots"}]),
    ),
    "import-bad-message": CliCase(
        ("import", "{file}"),
        "messages[0]",
        export_doc(
            messages=[{"role": "user", "content": 42, "created_at": "2026-01-01T00:00:00+00:00"}]
        ),
    ),
    "import-bad-date": CliCase(
        ("import", "{file}"),
        "created_at",
        export_doc(messages=[{"role": "user", "content": "hi", "created_at": "tomorrow"}]),
    ),
    "import-date-before-year-one-in-utc": CliCase(
        ("import", "{file}"),
        "created_at",
        export_doc(
            messages=[{"role": "user", "content": "hi", "created_at": "0001-01-01T00:00+05:00"}]
        ),
    ),
    # An id Postgres cannot index: "the database failed … is it running?", exit 1.
    "import-user-id-too-long": CliCase(
        ("import", "{file}"), "the most an id may have is 255", export_doc(user="w" * 300)
    ),
    "import-block-label-too-long": CliCase(
        ("import", "{file}"),
        "blocks[0].label",
        export_doc(blocks=[{"label": os.urandom(5000).hex(), "value": "x", "limit": 2000}]),
    ),
    "export-to-missing-dir": CliCase(
        ("export", "--tenant", "cli", "--user", "existing", "--output", "/nonexistent/x.json"),
        "/nonexistent/x.json",
    ),
}
CLI_BUGS: dict[str, Bug] = {}


def cli_args(name: str, folder: Any) -> list[str]:
    spec = CLI_CASES[name]
    if spec.file is None:
        return list(spec.args)
    path = folder / f"{name}.json"
    path.write_bytes(spec.file)
    return [str(path) if a == "{file}" else a for a in spec.args]


def assert_operator_error(run: Run, says: str) -> None:
    assert "Traceback" not in run.err, run.err[-800:]
    assert run.out == ""
    assert_one_line(run.err)
    assert says in run.err, run.err


@pytest.mark.parametrize(
    "name",
    [case(n, *bug_marks(CLI_BUGS, n), id=n) for n in CLI_CASES],
)
async def test_cli_operator_errors(tmp_path, module_fake, pg_url, module_schema, eng, name):
    await eng.agent("cli", "existing")
    users = await user_count(eng.sessions)
    run = await run_cli(cli_env(module_fake, pg_url, module_schema), *cli_args(name, tmp_path))
    if name == "reset-unknown-member":  # not an error: nothing to do, and it says so
        assert run.code == 0 and "nothing to reset" in run.err
    else:
        assert run.code == 2, run
    assert_operator_error(run, CLI_CASES[name].says)
    assert await user_count(eng.sessions) == users  # nothing created, nothing half-imported
    assert module_fake.requests == []


REAL_PROCESS = ["export-hostile-names", "import-binary", "import-deep-json"]


@pytest.fixture(scope="module")
async def cli_processes(module_fake, pg_url, module_schema, tmp_path_factory) -> dict[str, Run]:
    """A few cases as real `python -m bot.cli` processes, all at once (each takes a second)."""
    env = cli_env(module_fake, pg_url, module_schema)
    folder = tmp_path_factory.mktemp("hostile-cli")

    async def run(name: str) -> tuple[str, Run]:
        args = cli_args(name, folder) if name in CLI_CASES else PARSE_ERRORS[name]
        proc = await asyncio.create_subprocess_exec(
            *COMPANION,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return name, Run(-1, "", "timed out")
        return name, Run(proc.returncode or 0, out.decode(), err.decode())

    return dict(await asyncio.gather(*(run(n) for n in REAL_PROCESS)))


@pytest.mark.parametrize(
    "name",
    [case(n, *bug_marks(CLI_BUGS, n), id=n) for n in REAL_PROCESS],
)
async def test_cli_real_process(cli_processes, name):
    run = cli_processes[name]
    assert run.code == 2, run
    if name in PARSE_ERRORS:
        assert "Traceback" not in run.err and "error:" in run.err and run.out == ""
    else:
        assert_operator_error(run, CLI_CASES[name].says)


# =============================================================================================
# Commands: Slack's /companion
# =============================================================================================


HELP_FIRST = "memory: show what I remember about you"
SLACK_COMMANDS = {
    # (text, who: member | admin | ops, expected words)
    "nothing": ("", "member", HELP_FIRST),
    "unknown": ("frobnicate now", "member", HELP_FIRST),
    "shouting-unknown": ("DROP TABLE users", "member", HELP_FIRST),
    "quiet-no-hours": ("quiet", "member", HELP_FIRST),
    "quiet-garbage": ("quiet 25:99-x", "member", "write quiet hours like 22:00-09:00"),
    "quiet-out-of-range": ("quiet 25-99", "member", "hours go from 00 to 23"),
    "quiet-one-time": ("quiet 22:00", "member", "write quiet hours like"),
    "quiet-injection": ("quiet 22-7; DROP TABLE users", "member", "write quiet hours like"),
    "quiet-huge-number": ("quiet 99999999999999999999-1", "member", "write quiet hours like"),
    "timezone-missing": ("timezone", "member", HELP_FIRST),
    "timezone-traversal": ("timezone ../../etc", "member", "is not a time zone"),
    "timezone-absolute": ("timezone /etc/localtime", "member", "is not a time zone"),
    "timezone-region-only": ("timezone Europe", "member", "is not a time zone"),
    "timezone-huge": ("timezone " + "A" * 5000, "member", "is not a time zone"),
    "timezone-nul": ("timezone UTC\x00", "member", "is not a time zone"),
    "openers-maybe": ("openers maybe", "member", HELP_FIRST),
    "openers-missing": ("openers", "member", HELP_FIRST),
    "memory-unknown-member": ("memory", "member", NOTHING_YET),
    "export-unknown-member": ("export", "member", NOTHING_YET),
    "admin-not-allowed": ("admin export <@U2>", "member", NOT_ADMIN),
    "admin-reset-not-allowed": ("admin reset <@U2>", "member", NOT_ADMIN),
    "admin-welcome-not-allowed": ("admin welcome off", "member", NOT_ADMIN),
    "admin-no-action": ("admin", "admin", "Usage: /companion admin"),
    "admin-unknown-action": ("admin obliterate <@U2>", "admin", "Usage: /companion admin"),
    "admin-mention-garbage": ("admin reset @bob", "admin", "Usage: /companion admin"),
    "admin-empty-mention": ("admin export <@>", "admin", "Usage: /companion admin"),
    "admin-lower-case-id": ("admin export <@u2>", "admin", "Usage: /companion admin"),
    "admin-welcome-maybe": ("admin welcome maybe", "admin", "Usage: /companion admin"),
    "admin-export-unknown-member": ("admin export <@UNOBODY>", "ops", "no memory of <@UNOBODY>"),
}
AUDITED = {"admin-export-unknown-member"}


@pytest.mark.parametrize("name", list(SLACK_COMMANDS))
async def test_slack_command(slack, module_sessions, module_members, name):
    words, who, expected = SLACK_COMMANDS[name]
    actor = {"member": slack_uid(), "admin": "UADMIN", "ops": "UOPS"}[who]
    audits, users = await audit_count(module_sessions), await user_count(module_sessions)
    welcome = await module_members.tenant_settings(SLACK_TENANT)
    answers = await slack.command(words, actor)
    (answer,) = answers
    assert answer["response_type"] == "ephemeral"
    assert expected in answer["text"], answer["text"]
    assert "Traceback" not in answer["text"] and len(answer["text"]) < 3000
    if expected != HELP_FIRST:
        assert_one_line(answer["text"])
    assert await audit_count(module_sessions) == audits + (name in AUDITED)
    assert await user_count(module_sessions) == users, "a refused command created a member"
    assert await module_members.tenant_settings(SLACK_TENANT) == welcome
    assert await module_members.view(SLACK_TENANT, actor) is None or actor in ("UADMIN", "UOPS")


async def test_slack_admin_reset_of_an_unknown_member(slack, module_sessions, module_members):
    audits, users = await audit_count(module_sessions), await user_count(module_sessions)
    (asked,) = await slack.command("admin reset <@UGHOST>", "UADMIN")
    button = asked["blocks"][1]["elements"][0]
    assert button["value"] == "UGHOST"
    assert await audit_count(module_sessions) == audits  # a question is not an action
    (done,) = await slack.press(RESET, button["value"], "UADMIN")
    assert_one_line(done["text"])
    assert "UGHOST" in done["text"] and "already empty" in done["text"]
    assert await audit_count(module_sessions) == audits + 1  # the confirmed reset is audited
    assert await user_count(module_sessions) == users  # and created nobody
    (entry,) = await module_members.audit_log(SLACK_TENANT, limit=1)
    assert (entry.actor, entry.action, entry.target) == ("UADMIN", "reset", "UGHOST")


async def test_slack_reset_button_pressed_by_a_member_changes_nothing(slack, module_sessions):
    audits = await audit_count(module_sessions)
    (answer,) = await slack.press(RESET, "UADMIN", slack_uid())
    assert answer["text"] == NOT_ADMIN
    assert await audit_count(module_sessions) == audits


# =============================================================================================
# Commands: Discord's slash commands
# =============================================================================================


def option(name: str, value: Any, kind: int = STRING) -> dict[str, Any]:
    return {"name": name, "type": kind, "value": value}


def ghost(user_id: int) -> dict[str, Any]:
    return {"users": {str(user_id): user(user_id, "Ghost")}}


GHOST = 1_200_000_000_000_000_099
DISCORD_COMMANDS: dict[str, tuple[Callable[[], tuple], dict[str, Any], str]] = {
    "timezone-traversal": (
        lambda: ("timezone", option("zone", "../../etc")),
        {},
        "is not a time zone",
    ),
    "timezone-region-only": (lambda: ("timezone", option("zone", "Europe")), {}, "not a time"),
    "timezone-empty": (lambda: ("timezone", option("zone", "")), {}, "is not a time zone"),
    "timezone-huge": (lambda: ("timezone", option("zone", "B" * 5000)), {}, "not a time zone"),
    "timezone-surrogate": (lambda: ("timezone", option("zone", "caf\udce9")), {}, "not a time"),
    "quiet-garbage": (lambda: ("quiet-hours", option("hours", "25:99-x")), {}, "like 22:00"),
    "quiet-out-of-range": (lambda: ("quiet-hours", option("hours", "24-7")), {}, "00 to 23"),
    "quiet-empty": (lambda: ("quiet-hours", option("hours", "")), {}, "like 22:00-09:00"),
    "quiet-nul": (lambda: ("quiet-hours", option("hours", "22\x00-7")), {}, "like 22:00"),
    "memory-show-unknown": (lambda: ("memory", subcommand("show")), {}, NOTHING_YET),
    "memory-export-unknown": (lambda: ("memory", subcommand("export")), {}, NOTHING_YET),
    "admin-export-not-allowed": (
        lambda: ("admin", subcommand("export", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST)},
        NOT_ADMIN,
    ),
    "admin-reset-view-only-permissions": (
        lambda: ("admin", subcommand("reset", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST), "permissions": 0x400 | 0x800},
        NOT_ADMIN,
    ),
    "admin-welcome-not-allowed": (
        lambda: ("admin", subcommand("welcome", enabled=(BOOLEAN, False))),
        {},
        NOT_ADMIN,
    ),
    "admin-welcome-in-a-dm": (
        lambda: ("admin", subcommand("welcome", enabled=(BOOLEAN, False))),
        {"in_dm": True},
        NOT_ADMIN,
    ),
    "admin-export-unknown-member": (
        lambda: ("admin", subcommand("export", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST), "permissions": MANAGE_GUILD},
        "I have no memory of Ghost.",
    ),
}


@pytest.mark.parametrize("name", list(DISCORD_COMMANDS))
async def test_discord_command(dc, module_sessions, module_members, name):
    build, extra, expected = DISCORD_COMMANDS[name]
    who = snowflake()
    audits, users = await audit_count(module_sessions), await user_count(module_sessions)
    welcome = await module_members.tenant_settings(DISCORD_TENANT)
    payload = await dc.slash(who, *build(), **extra)
    answers = [a for a in dc.answers(payload) if a]
    assert answers, "no answer"
    assert expected in answers[-1], answers
    for answer in answers:
        assert_one_line(answer)
        assert answer != SORRY and len(answer) <= DISCORD_LIMIT
    for callback in dc.api.callbacks(payload):
        assert callback.body["data"]["flags"] & 64  # ephemeral
    assert await audit_count(module_sessions) == audits + (name == "admin-export-unknown-member")
    assert await user_count(module_sessions) == users, "a refused command created a member"
    assert await module_members.view(DISCORD_TENANT, str(who)) is None
    assert await module_members.tenant_settings(DISCORD_TENANT) == welcome


async def test_discord_openers_outside_the_choices_changes_nothing(
    dc, module_sessions, module_members
):
    who = snowflake()
    await module_members.settings(DISCORD_TENANT, str(who), openers=True)
    payload = await dc.slash(who, "openers", option("setting", "maybe"))
    answers = [a for a in dc.answers(payload) if a]
    assert answers == ["That didn't work: openers are `on` or `off`."], answers
    assert (await module_members.view(DISCORD_TENANT, str(who))).settings.get("openers") is True


async def test_discord_unknown_command_gets_an_answer(dc, module_sessions):
    users = await user_count(module_sessions)
    payload = await dc.slash(snowflake(), "frobnicate", option("x", "y"))
    # Discord only sends commands the bot registered; a stale one still gets a reply (the
    # generic apology: not precise, but an answer, ephemeral, and nothing changes).
    (answer,) = dc.answers(payload)
    assert_one_line(answer)
    assert all(c.body["data"]["flags"] & 64 for c in dc.api.callbacks(payload))
    assert await user_count(module_sessions) == users


async def test_discord_admin_reset_of_an_unknown_member_is_audited_once(
    dc, module_sessions, module_members
):
    audits, users = await audit_count(module_sessions), await user_count(module_sessions)
    asked = await dc.slash(
        MOD,
        "admin",
        subcommand("reset", member=(USER, str(GHOST))),
        permissions=MANAGE_GUILD,
        resolved=ghost(GHOST),
    )
    assert "Are you sure?" in dc.answers(asked)[0]
    assert await audit_count(module_sessions) == audits
    clicked = await dc.click(MOD, asked, "Erase", permissions=MANAGE_GUILD)
    assert dc.answers(clicked)[-1] == "I had no memory of Ghost."
    assert await audit_count(module_sessions) == audits + 1
    assert await user_count(module_sessions) == users


async def test_discord_admin_reset_confirmed_after_losing_the_right_does_nothing(
    dc, module_sessions
):
    audits = await audit_count(module_sessions)
    asked = await dc.slash(
        MOD,
        "admin",
        subcommand("reset", member=(USER, str(GHOST))),
        permissions=MANAGE_GUILD,
        resolved=ghost(GHOST),
    )
    clicked = await dc.click(MOD, asked, "Erase", permissions=0)
    assert dc.answers(clicked)[-1] == NOT_ADMIN
    assert await audit_count(module_sessions) == audits


async def test_discord_forget_of_an_unknown_member(dc, module_sessions):
    who = snowflake()
    asked = await dc.slash(who, "memory", subcommand("forget"))
    assert dc.answers(asked) == [FORGET_ASK]
    clicked = await dc.click(who, asked, "Erase")
    assert dc.answers(clicked)[-1] == NOTHING_YET
    assert await scope_of(module_sessions, DISCORD_TENANT, str(who)) is None
