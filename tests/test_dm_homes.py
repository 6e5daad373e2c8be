"""A member's direct messages keep their memory whatever servers the bot joins.

The rules of the first pick (core.members.dm_homes), that a recorded home sticks, that the
member moves it and erasing them erases it; then the reported case end to end in Discord:
the bot, in one server, is added to a second; the member's DMs keep the first's memory, an
admin of that server reaches it, the member sees where it lives and can move it.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from adapters.common import Services
from core.models import DmHome
from tests.fake_discord import guild, member, text_channel, user
from tests.fake_openai import default_brain
from tests.rigs import discord_rig, settle

ONE, TWO = "discord:1", "discord:2"


async def talk(engine, tenant, who, text, clock):
    from core.events import EventKind, InboundEvent

    scope = await engine.agent(tenant, who)
    await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    clock.advance(minutes=5)
    return scope


@pytest.fixture
def homes(members):
    return members.dm_homes


async def test_the_first_pick_follows_the_rules(homes, engine, clock):
    assert await homes.resolve("discord", "a", [ONE, TWO], "discord:9") == "discord:9"
    assert await homes.resolve("discord", "b", [TWO], None) == TWO  # the only server
    await talk(engine, ONE, "c", "hi from one", clock)
    await talk(engine, TWO, "c", "hi from two", clock)  # most recent
    assert await homes.resolve("discord", "c", [ONE, TWO], None) == TWO
    assert await homes.resolve("discord", "d", [], None) == "discord:dm"
    picks = {h.external_id: h.chosen for h in await homes_rows(homes)}
    assert picks == {"a": "configured", "b": "only", "c": "memory", "d": "fallback"}


async def homes_rows(homes):
    async with homes.sessions() as session:
        return list(await session.scalars(select(DmHome)))


async def test_a_recorded_home_sticks_until_the_member_moves_it(homes, members, engine, clock):
    assert await homes.resolve("discord", "ann", [ONE], None) == ONE
    await talk(engine, TWO, "ann", "I am in two now", clock)  # later, and more recent
    assert await homes.resolve("discord", "ann", [ONE, TWO], "discord:9") == ONE
    await homes.choose("discord", "ann", TWO)
    assert await homes.resolve("discord", "ann", [ONE, TWO], None) == TWO
    assert (await homes.home("discord", "ann")).chosen == "member"

    await members.admin_reset(TWO, "admin", "ann")  # memory erased, the choice is kept
    assert (await homes.home("discord", "ann")).tenant == TWO
    await members.forget(TWO, "ann")  # the member erased there: the choice goes with them
    assert await homes.home("discord", "ann") is None


async def test_concurrent_first_dms_agree(homes, engine, clock):
    import asyncio

    await talk(engine, ONE, "eve", "hello", clock)
    picks = await asyncio.gather(
        homes.resolve("discord", "eve", [ONE, TWO], None),
        homes.resolve("discord", "eve", [TWO], "discord:2"),
    )
    assert picks[0] == picks[1]


# --- the reported case, in Discord --------------------------------------------------------

G1, G2 = 1_300_000_000_000_000_001, 1_300_000_000_000_000_002
C1, C2 = 1_300_000_000_000_000_003, 1_300_000_000_000_000_004
DM = 1_300_000_000_000_000_005
BOT_ID, APP_ID = 1_300_000_000_000_000_010, 1_300_000_000_000_000_011
ANN, MOD = 1_300_000_000_000_000_020, 1_300_000_000_000_000_021
NAMES = {ANN: "Ann", MOD: "Mo", BOT_ID: "Companion"}
MANAGE_GUILD = 1 << 5


def server(guild_id, channel, name):
    people = [member(ANN, "Ann"), member(MOD, "Mo"), member(BOT_ID, "Companion")]
    payload = guild(guild_id, MOD, [text_channel(channel, guild_id, "general")], [], people, [])
    payload["name"] = name
    return payload


async def test_dms_keep_their_memory_when_the_bot_joins_a_second_server(
    engine, members, fake, clock
):
    fake.brain = default_brain
    services = Services(engine, members)
    async with discord_rig(
        services,
        bot=user(BOT_ID, "Companion", bot=True),
        app_id=APP_ID,
        server=server(G1, C1, "Harbour Club"),
        channel_id=C1,
        names=NAMES.__getitem__,
    ) as rig:
        await rig.say(ANN, "remember that I like green tea", DM, dm=True)
        rig.state.parse_guild_create(server(G2, C2, "Chess Night"))  # anyone may add a bot
        await settle()
        await rig.say(ANN, "what do you know about me?", DM, dm=True)
        assert "green tea" in rig.api.texts(DM)[-1]  # the same agent, its memory intact

        # An admin of the first server reaches everything the DMs said.
        doc = await members.admin_export(f"discord:{G1}", str(MOD), str(ANN))
        said = [m["content"] for m in doc["messages"] if m["role"] == "user"]
        assert said == ["remember that I like green tea", "what do you know about me?"]

        shown = await rig.slash(ANN, "memory", {"type": 1, "name": "show"}, in_dm=True)
        assert (
            "Our direct messages use what I remember of you in **Harbour Club**"
            in (rig.answers(shown)[-1])
        )

        # The member moves their DMs to the second server's memory.
        rig.guild_id, rig.server, rig.channel_id = G2, server(G2, C2, "Chess Night"), C2
        moved = await rig.slash(ANN, "memory", {"type": 1, "name": "home"})
        assert "**Chess Night**" in rig.answers(moved)[-1]
        await rig.say(ANN, "what do you know about me?", DM, dm=True)
        assert "green tea" not in rig.api.texts(DM)[-1]
        async with members.sessions() as session:
            homes = (await session.execute(select(DmHome.chosen))).scalars().all()
        assert homes == ["member"]
