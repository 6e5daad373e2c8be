"""Discord never sends a message twice: a message is stored before anything else happens to
it, and what the bot missed is read back when a session starts.

The bot of tests/test_discord.py talks with Ann (DM) and Bob (#general). Then it "misses"
messages: they are posted to the fake's channel history but no MESSAGE_CREATE reaches the
client (the process was down, or died before storing them). A new gateway session (READY,
GUILD_CREATE) starts, as after a restart; the bot reads the channels back and answers what
was meant for it, once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from adapters.inbound import FILE_FAILED, SharedFile, message_event, take
from core.models import Event, Passage
from tests.fake_discord import attachment, message, snowflake, text_channel, user
from tests.rigs import DiscordRig
from tests.test_discord import (  # noqa: F401 (bot: the fixture)
    ANN,
    BOB,
    BOT,
    DM,
    GENERAL,
    GUILD,
    NAMES,
    TENANT,
    bot,
    guild_member,
)


def missed(
    rig: DiscordRig, author: int, channel: int, content: str, **extra: Any
) -> dict[str, Any]:
    """Posted in the channel; the bot never hears of it over the gateway."""
    who = user(author, NAMES[author])
    if channel == DM:
        payload = message(who, DM, content, **extra)
    else:
        extra.setdefault("author_member", guild_member(author))
        payload = message(who, channel, content, guild_id=GUILD, **extra)
    rig.api.history.setdefault(channel, []).append(payload)
    return payload


async def said(rig: DiscordRig, author: int, channel: int, content: str, **extra: Any) -> None:
    """Posted in the channel and heard live (so it is in the channel's history too)."""
    payload = await rig.say(author, content, channel, dm=channel == DM, **extra)
    rig.api.history.setdefault(channel, []).append(payload)


async def new_session(rig: DiscordRig, engine: Any) -> None:
    """READY and the server, as after a restart; returns once on_ready's work is done."""
    await rig.reconnect()
    await engine.wait_idle()


async def test_what_was_missed_is_read_back_and_answered_once(bot, engine, fake):  # noqa: F811
    await said(bot, ANN, DM, "hello")
    await said(bot, BOB, GENERAL, f"<@{bot.client.user.id}> hi", mentions=[BOT])
    missed(bot, ANN, DM, "are you still there?")
    missed(bot, ANN, GENERAL, "lunch anyone?")  # not for the bot
    missed(bot, BOB, GENERAL, f"<@{bot.client.user.id}> did you see my note?", mentions=[BOT])
    await new_session(bot, engine)
    assert bot.api.texts(DM) == ["You said: hello", "You said: are you still there?"]
    assert bot.api.texts(GENERAL) == ["You said: hi", "You said: did you see my note?"]
    await new_session(bot, engine)  # read back again: nothing is answered twice
    assert len(bot.api.texts(DM)) == 2 and len(bot.api.texts(GENERAL)) == 2
    assert len(fake.chat_requests) == 4


async def test_words_beside_a_file_that_breaks_are_answered(bot, sessions):  # noqa: F811
    bot.api.broken.add("gone.txt")
    dead = bot.api.file_url("gone.txt")  # the connection drops
    bot.api.files["notes.txt"] = b"The boat needs new sails before June."
    files = [
        attachment(dead, "gone.txt", 40),
        attachment(bot.api.file_url("notes.txt"), "notes.txt", 37),
    ]
    await bot.say(ANN, "two files for you", DM, dm=True, attachments=files)
    failed, _, words = bot.api.texts(DM)  # the middle one answers the file that came
    assert failed == FILE_FAILED.format(name="gone.txt")
    assert words == "You said: two files for you"
    async with sessions() as session:
        sources = (await session.scalars(select(Passage.source))).all()
    assert [source.split(" (")[0] for source in sources] == ["notes.txt"]


async def test_a_message_is_stored_before_typing_shows_and_answered_without_it(
    bot,  # noqa: F811
    sessions,
):
    stored_at_typing: list[int] = []

    async def look(call: Any) -> None:
        if call.path.endswith("/typing"):
            async with sessions() as session:
                stored_at_typing.append(
                    await session.scalar(select(func.count()).select_from(Event))
                )

    bot.api.on_call = look
    bot.api.typing_status = 403  # no permission to show typing here: still answered
    await bot.say(ANN, "can you hear me?", DM, dm=True)
    assert stored_at_typing == [1]
    assert bot.api.texts(DM) == ["You said: can you hear me?"]


async def test_a_message_held_for_its_files_is_taken_again_on_read_back(
    bot,  # noqa: F811
    engine,
    sessions,
):
    """Stored, held for its file, then the process died: the next session reads it back,
    fetches the file and answers the words."""
    await said(bot, ANN, DM, "hello")
    bot.api.files["notes.txt"] = b"The boat needs new sails before June."
    shared = attachment(bot.api.file_url("notes.txt"), "notes.txt", 37)
    payload = missed(bot, ANN, DM, "read my notes", attachments=[shared])

    async def died() -> bytes:
        raise AssertionError("the process died before fetching")

    scope = await engine.agent(TENANT, str(ANN))
    meta = {"platform": "discord", "channel_id": str(DM), "message_id": payload["id"]}
    file = SharedFile("notes.txt", 37, f"discord:att:{shared['id']}", died)
    event = message_event("read my notes", f"discord:msg:{payload['id']}", meta, [file])
    await take(engine, scope, event, has_files=True)

    await new_session(bot, engine)
    assert bot.api.texts(DM)[-1] == "You said: read my notes"
    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(Passage)) == 1


async def test_a_first_mention_in_a_channel_of_its_server_is_read_back(bot, engine):  # noqa: F811
    """Issue 8, finding 1 (Discord): a mention in a channel where the bot never talked, sent
    while it was down or dying, was out of reach of the read-back, which only knew channels
    with stored messages. The server's channel list names the channels with newer messages."""
    await said(bot, ANN, DM, "hello")
    quiet, busy = snowflake(), snowflake()
    for channel_id, name in ((quiet, "quiet"), (busy, "busy")):
        bot.server["channels"].append(text_channel(channel_id, GUILD, name))
    mention = missed(bot, BOB, busy, f"<@{bot.client.user.id}> first time here", mentions=[BOT])
    missed(bot, ANN, busy, "just chatting")  # not for the bot
    bot.server["channels"][-1]["last_message_id"] = mention["id"]
    await new_session(bot, engine)
    assert bot.api.texts(busy) == ["You said: first time here"]
    # Only channels with something newer than what the bot stored are read.
    assert not bot.api.find("GET", f"/channels/{quiet}/messages")
    await new_session(bot, engine)
    assert bot.api.texts(busy) == ["You said: first time here"]  # once
