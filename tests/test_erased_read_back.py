"""A member erased (reset by an admin, or forget me) should stay erased when the bot reads a
channel back after a restart: their earlier messages, still in Discord's history, should
not be taken, stored or answered again.

Found (rights8): they were. The read-back starts a little before the newest message stored
from the channel; the erase deleted the member's events, so their messages after another
member's newest one were "missed" messages to it: stored in the member's fresh agent and
answered again in the channel. Now each erase leaves its time in the community's settings
(core.directory.ERASED), and a message written before it is not taken.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from core.directory import ERASED, ERASED_DAYS
from core.models import Message, Tenant
from tests.fake_slack import TEAM
from tests.rigs import slack_message
from tests.test_discord import (  # noqa: F401 (bot: the fixture)
    ANN,
    BOB,
    BOT,
    GENERAL,
    TENANT,
    bot,
)
from tests.test_discord_catchup import new_session, said
from tests.test_members import _chat
from tests.test_slack import slack  # noqa: F401 (the fixture)


@pytest.mark.parametrize("erase", ["reset", "forget"])
async def test_an_erased_members_messages_do_not_come_back_on_read_back(
    bot,  # noqa: F811
    engine,
    members,
    sessions,
    erase,
):
    me = bot.client.user.id
    await said(bot, BOB, GENERAL, f"<@{me}> hi", mentions=[BOT])
    await said(bot, ANN, GENERAL, f"<@{me}> my locker code is 4711", mentions=[BOT])
    answered = ["You said: hi", "You said: my locker code is 4711"]
    assert bot.api.texts(GENERAL) == answered
    if erase == "reset":
        assert await members.admin_reset(TENANT, "admin", str(ANN))
    else:
        assert await members.forget(TENANT, str(ANN))
    await new_session(bot, engine)  # a restart: #general is read back from Bob's message
    async with sessions() as session:
        kept = await session.scalar(select(func.count()).where(Message.content.contains("4711")))
    assert (kept, bot.api.texts(GENERAL)) == (0, answered)  # was: 1, and answered twice


async def test_slack_sends_again_what_was_written_before_the_erase_and_it_is_not_taken(
    slack,  # noqa: F811
    fake,
    sessions,
    clock,
):
    """A Slack retry (or a held message fetched again) of a message from before a forget is
    not stored again; what the member writes after it is answered as usual."""
    before = slack_message(user="U1", text="my locker code is 4711")
    await slack.dispatch(before)
    assert await slack.members.forget(f"slack:{TEAM}", "U1")
    await slack.dispatch(before)  # Slack sends it again
    later = f"{clock.now.timestamp() + 60:.6f}"
    await slack.dispatch(slack_message(user="U1", text="hello again", ts=later, event_ts=later))
    async with sessions() as session:
        kept = list(await session.scalars(select(Message.content).where(Message.role == "user")))
    assert kept == ["hello again"]
    assert [m["text"] for m in slack.posted()][-1] == "You said: hello again"


async def test_the_note_of_an_erase_names_no_words_and_goes_after_erased_days(
    engine, members, sessions, clock
):
    for user in ("ann", "bob"):
        await _chat(engine, "g", user, f"my secret is {user}-4711")
    assert await members.forget("g", "ann")
    clock.advance(days=ERASED_DAYS + 1)
    assert await members.admin_reset("g", "admin", "bob")
    async with sessions() as session:
        settings = await session.scalar(select(Tenant.settings).where(Tenant.key == "g"))
    assert settings[ERASED] == {"bob": clock.now.isoformat()}  # ann's is older: gone
    assert "4711" not in str(settings)
