"""Discord replies that a kill left looking unsent are not posted twice.

A process killed between posting a reply and marking it sent leaves a reply that looks
undelivered; whoever finishes the work (the outbox sweep, or the member's next message)
must not post it again. Each part goes out with a nonce Discord enforces, and a retry reads
the channel back for the bot's own parts first. Driven with the real discord.py client
against FakeDiscord, whose `posted` is what the member sees in the channel.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import update

from adapters.discord.posting import DiscordOutlets
from core.models import Reply
from tests.fake_openai import is_summary_request, say, summary_of
from tests.test_discord import (  # noqa: F401 (bot: the fixture)
    ANN,
    DM,
    GENERAL,
    bot,
)


@pytest.fixture
def router(bot, platforms):  # noqa: F811
    platforms.add("discord", DiscordOutlets(bot.client))
    return platforms


async def killed_after_posting(sessions) -> None:
    """What a SIGKILL between the post and marking it sent leaves in the outbox."""
    async with sessions() as session, session.begin():
        await session.execute(update(Reply).values(delivered_at=None))


def seen(bot, channel: int) -> list[str]:  # noqa: F811
    return [m["content"] for m in bot.api.posted.get(channel, [])]


async def test_a_reply_posted_before_a_kill_is_not_posted_again(
    bot,  # noqa: F811
    router,
    engine,
    sessions,
    clock,
):
    await bot.mention(ANN, "the blue door is mine")
    assert seen(bot, GENERAL) == ["You said: the blue door is mine"]
    await killed_after_posting(sessions)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert seen(bot, GENERAL) == ["You said: the blue door is mine"]
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (0, 0)


async def test_only_the_parts_a_kill_cut_off_are_posted(
    bot,  # noqa: F811
    router,
    engine,
    sessions,
    clock,
    fake,
):
    long = " ".join(f"word{i}" for i in range(700))  # about 5,000 characters: three posts
    fake.brain = lambda body: summary_of(body) if is_summary_request(body) else say(long)
    await bot.mention(ANN, "tell me everything")
    whole = seen(bot, GENERAL)
    assert len(whole) == 3
    del bot.api.posted[GENERAL][1:]  # the kill came after the first part
    await killed_after_posting(sessions)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert seen(bot, GENERAL) == whole


async def test_a_dm_reply_posted_before_a_kill_is_not_posted_again(
    bot,  # noqa: F811
    router,
    engine,
    sessions,
    clock,
):
    await bot.say(ANN, "my bike is red", DM, dm=True)
    assert seen(bot, DM) == ["You said: my bike is red"]
    await killed_after_posting(sessions)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert seen(bot, DM) == ["You said: my bike is red"]


async def test_without_read_message_history_a_reply_goes_out_again_rather_than_never(
    bot,  # noqa: F811
    router,
    engine,
    sessions,
    clock,
    caplog,
):
    await bot.mention(ANN, "hello there")
    await killed_after_posting(sessions)
    bot.api.history_refused.add(GENERAL)
    bot.api.posted[GENERAL][0]["nonce"] = "expired"  # Discord forgets nonces after minutes

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert seen(bot, GENERAL) == ["You said: hello there"] * 2
    assert "cannot read channel back" in caplog.text


async def test_a_retry_within_minutes_is_stopped_by_the_nonce_even_without_history(
    bot,  # noqa: F811
    router,
    engine,
    sessions,
    clock,
):
    await bot.mention(ANN, "just once")
    await killed_after_posting(sessions)
    bot.api.history_refused.add(GENERAL)

    clock.advance(minutes=1)
    assert await engine.outbox.redeliver(timedelta(seconds=30)) == (1, 0)
    assert seen(bot, GENERAL) == ["You said: just once"]


async def test_a_first_delivery_does_not_read_the_channel(bot):  # noqa: F811
    reads = rf"/channels/{GENERAL}/messages"
    await asyncio.wait_for(bot.state._ready_task, 10)  # a new session's catch-up reads
    before = len(bot.api.find("GET", reads))
    await bot.mention(ANN, "hi")
    assert seen(bot, GENERAL) == ["You said: hi"]
    assert len(bot.api.find("GET", reads)) == before
