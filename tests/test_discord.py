"""The Discord adapter, driven by Discord's own gateway payloads against a fake REST API.

The real discord.py client logs in to `FakeDiscord`, is fed READY, GUILD_CREATE,
MESSAGE_CREATE, GUILD_MEMBER_ADD and INTERACTION_CREATE dicts, and everything it sends back
(typing, messages, interaction callbacks, files) is read from the fake's records.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from typing import Any

import pytest
from sqlalchemy import select

from adapters.common import FORGET_ASK, FORGET_DONE, NOT_ADMIN, WELCOME_EVENT, Services
from adapters.discord.commands import LAPSED, Confirm
from core.members.admission import BLOCKED_NOTICE, DMS_OFF
from core.members.community import Community
from core.memory.documents import MAX_UPLOAD_BYTES
from core.models import Event, Passage
from core.runtime.budgets import BUDGET_REPLY, RATE_REPLY
from core.tenants.access import Access
from tests.fake_discord import (
    EPHEMERAL,
    MANAGE_GUILD,
    attachment,
    command,
    guild,
    member,
    member_add,
    message,
    role,
    subcommand,
    text_channel,
    thread,
    user,
)
from tests.fake_openai import (
    calls,
    default_brain,
    is_summary_request,
    person_said,
    png,
    say,
    summary_of,
    tool_call,
)
from tests.rigs import discord_rig, elsewhere, settle
from tests.test_slack import signed_in, still_signed_in

GUILD = 1_100_000_000_000_000_001
GENERAL = 1_100_000_000_000_000_002
THREAD = 1_100_000_000_000_000_003
DM = 1_100_000_000_000_000_004  # Ann's DM channel with the bot
BOT_ID = 1_100_000_000_000_000_010
APP_ID = 1_100_000_000_000_000_011
BOT_ROLE = 1_100_000_000_000_000_012
MOD_ROLE = 1_100_000_000_000_000_013
ANN = 1_100_000_000_000_000_020
BOB = 1_100_000_000_000_000_021
MOD = 1_100_000_000_000_000_022  # has Manage Server
OPERATOR = 1_100_000_000_000_000_023  # in COMPANION_ADMIN_IDS, no Discord role
OWNER = 1_100_000_000_000_000_024
NAMES = {ANN: "Ann", BOB: "Bob", MOD: "Mo", OPERATOR: "Op", OWNER: "Olga", BOT_ID: "Companion"}
TENANT = f"discord:{GUILD}"
BOT = user(BOT_ID, "Companion", bot=True)
STRING, USER, BOOLEAN = 3, 6, 5


def guild_member(user_id: int, **extra: Any) -> dict[str, Any]:
    return member(user_id, NAMES[user_id], **extra)


def resolved_member(user_id: int) -> dict[str, Any]:
    as_member = {k: v for k, v in guild_member(user_id).items() if k != "user"}
    return {
        "users": {str(user_id): user(user_id, NAMES[user_id])},
        "members": {str(user_id): as_member},
    }


@pytest.fixture
async def bot(engine, members, sessions, clock):
    access = Access(sessions, clock, "https://companion.example")
    community = Community(sessions, engine.mind.config, clock)
    services = Services(
        engine, members, admin_ids=frozenset({str(OPERATOR)}), access=access, community=community
    )
    roles = [
        role(BOT_ROLE, "Companion", bot_id=BOT_ID),
        role(MOD_ROLE, "Moderators", permissions=MANAGE_GUILD),
    ]
    people = [guild_member(u) for u in (ANN, BOB, OWNER)]
    people += [guild_member(BOT_ID, roles=[BOT_ROLE]), guild_member(MOD, roles=[MOD_ROLE])]
    people[-2]["user"]["bot"] = True
    server = guild(
        GUILD,
        OWNER,
        [text_channel(GENERAL, GUILD, "general")],
        [thread(THREAD, GUILD, GENERAL, ANN)],
        people,
        roles,
    )
    async with discord_rig(
        services, bot=BOT, app_id=APP_ID, server=server, channel_id=GENERAL, names=NAMES.__getitem__
    ) as rig:
        rig.api.dm_channels[ANN] = DM
        yield rig


user_texts = person_said  # what the member said, as the model is shown it


# Start-up


async def test_login_and_ready_sync_the_slash_commands(bot):
    assert bot.api.find("GET", "/users/@me") and bot.client.user.id == BOT_ID
    (sync,) = bot.api.find("PUT", f"/applications/{APP_ID}/commands")
    commands = {c["name"]: c for c in sync.body}
    assert set(commands) == {"memory", "admin", "openers", "quiet-hours", "timezone"}
    assert {o["name"] for o in commands["memory"]["options"]} == {
        "show",
        "export",
        "forget",
        "web",
        "home",
    }
    assert "web" in {o["name"] for o in commands["admin"]["options"]}
    assert int(commands["admin"]["default_member_permissions"]) == MANAGE_GUILD
    assert commands["admin"]["contexts"] == [0]  # servers only, never DMs
    assert commands["admin"]["dm_permission"] is False
    assert [c["value"] for c in commands["openers"]["options"][0]["choices"]] == ["on", "off"]
    intents = bot.client.intents
    assert intents.members and intents.message_content and intents.dm_messages
    assert intents.guild_messages and intents.guilds


# Messages


async def test_a_dm_is_answered_in_the_dm_by_the_home_servers_agent(bot, fake):
    await bot.say(ANN, "hello there", DM, dm=True)
    assert bot.api.texts(DM) == ["You said: hello there"]
    assert bot.api.find("POST", f"/channels/{DM}/typing")
    assert "message_reference" not in bot.api.sent(DM)[0].body
    view = await bot.members.view(TENANT, str(ANN))
    assert view is not None and view.messages >= 2


async def test_a_mention_is_answered_in_the_channel_as_a_reply(bot, fake):
    said = await bot.mention(
        ANN, f"tell <@{BOB}> hi in <#{GENERAL}>", mentions=[BOT, user(BOB, "Bob")]
    )
    (reply,) = bot.api.sent(GENERAL)
    assert reply.body["content"] == "You said: tell @Bob hi in #general"
    assert reply.body["message_reference"]["message_id"] == int(said["id"])
    assert reply.body["allowed_mentions"]["parse"] == []  # model output pings nobody
    typing = bot.api.calls.index(bot.api.find("POST", f"/channels/{GENERAL}/typing")[0])
    assert typing < bot.api.calls.index(reply)
    assert user_texts(fake.chat_requests[-1])[-1] == "tell @Bob hi in #general"


async def test_a_mention_of_the_bots_role_and_a_reply_to_the_bot_count(bot):
    payload = message(
        user(ANN, "Ann"),
        GENERAL,
        f"<@&{BOT_ROLE}> ahoy",
        guild_id=GUILD,
        author_member=guild_member(ANN),
    )
    payload["mention_roles"] = [str(BOT_ROLE)]
    bot.state.parse_message_create(payload)
    await settle()
    earlier = message(BOT, GENERAL, "You said: ahoy", guild_id=GUILD)
    await bot.say(ANN, "and another thing", replying_to=earlier)
    assert bot.api.texts(GENERAL) == ["You said: ahoy", "You said: and another thing"]


async def test_a_thread_message_is_answered_in_the_thread(bot):
    said = await bot.mention(BOB, "what about this thread?", channel=THREAD)
    (reply,) = bot.api.sent(THREAD)
    assert reply.body["content"] == "You said: what about this thread?"
    assert reply.body["message_reference"]["message_id"] == int(said["id"])
    assert not bot.api.sent(GENERAL)


async def test_messages_not_for_the_bot_are_ignored(bot, fake):
    other_bot = user(1_100_000_000_000_000_099, "Robo", bot=True)
    await bot.say(ANN, "just chatting with friends")
    await bot.say(ANN, "replying to Bob", replying_to=message(user(BOB, "Bob"), GENERAL, "hi"))
    await bot.say(
        0, f"<@{BOT_ID}> beep", mentions=[BOT], author_payload=other_bot, author_member=None
    )
    await bot.say(BOT_ID, f"<@{BOT_ID}> talking to myself", mentions=[BOT], author_payload=BOT)
    await bot.say(ANN, "", kind=7)  # "Ann joined the server": a system message
    await bot.say(ANN, f"<@{BOT_ID}>", mentions=[BOT], kind=6)  # a pin notice
    assert fake.requests == []
    assert not bot.api.find("POST", r"/channels/\d+/(messages|typing)")


async def test_a_replayed_message_is_answered_once(bot, fake):
    said = await bot.mention(ANN, "only once please")
    bot.state.parse_message_create(said)  # the gateway resumed and sent it again
    await settle()
    twice = message(
        user(BOB, "Bob"),
        GENERAL,
        f"<@{BOT_ID}> at the same time",
        guild_id=GUILD,
        author_member=guild_member(BOB),
        mentions=[BOT],
    )
    bot.state.parse_message_create(twice)
    bot.state.parse_message_create(twice)
    await settle()
    assert bot.api.texts(GENERAL) == ["You said: only once please", "You said: at the same time"]
    assert len(fake.chat_requests) == 2


LONG = (
    "Here is the plan.\n\n"
    + "Sailing is about patience and reading the water. " * 30
    + "\n\n```python\n"
    + "\n".join(f"knots_{i} = {i} * 1.852  # nautical miles per hour" for i in range(30))
    + "\n```\n\n"
    + "Trim the sails, watch the wind, and keep the bow steady. " * 40
)


async def test_a_long_reply_is_split_with_code_blocks_intact(bot, fake):
    assert len(LONG) >= 4500
    fake.brain = lambda body: summary_of(body) if is_summary_request(body) else say(LONG)
    said = await bot.mention(ANN, "explain sailing")
    parts = bot.api.sent(GENERAL)
    texts = [p.body["content"] for p in parts]
    assert len(texts) >= 3 and all(len(t) <= 2000 for t in texts)
    assert all(len(re.findall(r"^```", t, re.MULTILINE)) % 2 == 0 for t in texts)
    code = LONG[LONG.index("```python") : LONG.index("```\n\n") + 3]
    assert any(code in t for t in texts)  # the block fits in one part, so it stays whole
    assert " ".join(" ".join(texts).split()) == " ".join(LONG.split())
    assert parts[0].body["message_reference"]["message_id"] == int(said["id"])
    assert all("message_reference" not in p.body for p in parts[1:])


async def test_attachments_go_to_archival_memory_and_bad_ones_are_refused(bot, sessions):
    notes = "Harbour rules\nBoats leave before nine.\nThe red buoy marks the reef.\n"
    bot.api.files["notes.txt"] = notes.encode()
    bot.api.files["tool.exe"] = b"MZ\x90\x00"
    files = [
        attachment(bot.api.file_url("notes.txt"), "notes.txt", len(notes)),
        attachment(bot.api.file_url("tool.exe"), "tool.exe", 4),
        attachment(bot.api.file_url("huge.md"), "huge.md", MAX_UPLOAD_BYTES + 1),
    ]
    await bot.mention(ANN, "keep these", attachments=files)
    texts = bot.api.texts(GENERAL)
    assert "I can't read tool.exe: I take" in texts[1] and ".txt" in texts[1]
    assert texts[2] == "huge.md is 5.2 MB; the most I take is 5 MB"
    assert texts[-1] == "You said: keep these"
    downloads = [c.path for c in bot.api.find("GET", r"/attachments/.*")]
    assert downloads == ["/attachments/notes.txt"]  # refused files are never downloaded
    scope = await bot.client.services.engine.agent(TENANT, str(ANN))
    async with sessions() as session:
        passages = list(
            await session.scalars(select(Passage).where(Passage.agent_id == scope.agent_id))
        )
    assert len(passages) == 1 and "red buoy" in passages[0].text
    assert passages[0].source.startswith("notes.txt")

    await bot.mention(ANN, "again", attachments=files[:1])  # the same file, redelivered
    async with sessions() as session:
        again = list(
            await session.scalars(select(Passage).where(Passage.agent_id == scope.agent_id))
        )
    assert len(again) == 1


async def test_only_the_speakers_words_reach_their_agent(bot, fake):
    ann = ["my boat is called Heron", "I sail on Sundays"]
    bob = ["I play jazz piano", "my cat is Miso"]
    for a, b in zip(ann, bob, strict=True):
        await bot.mention(ANN, a)
        await bot.mention(BOB, b)
    await bot.say(
        BOB,
        f"<@{BOT_ID}> and Ann said what?",
        mentions=[BOT],
        replying_to=message(user(ANN, "Ann"), GENERAL, ann[0], guild_id=GUILD),
    )
    assert len(fake.chat_requests) == 5
    for request in fake.chat_requests:
        prompt = json.dumps(request)
        has_ann = any(t in prompt for t in ann)
        has_bob = any(t in prompt for t in bob)
        assert has_ann != has_bob  # exactly one member's conversation, never both
    ann_last, bob_last = fake.chat_requests[2], fake.chat_requests[-1]
    assert "You said: my boat is called Heron" in json.dumps(ann_last)  # her own history
    assert user_texts(bob_last)[-1] == "and Ann said what?"  # not the message he replied to
    replies = bot.api.sent(GENERAL)
    assert replies[-1].body["content"] == "You said: and Ann said what?"


# Joins


async def test_a_new_member_is_welcomed_by_dm(bot, fake):
    newcomer = 1_100_000_000_000_000_050
    bot.state.parse_guild_member_add(member_add(GUILD, member(newcomer, "Nia")))
    await settle()
    (opened,) = bot.api.find("POST", "/users/@me/channels")
    assert opened.body["recipient_id"] == newcomer
    assert bot.api.sent(bot.api.dm_channels[newcomer])
    assert WELCOME_EVENT.format(name="Nia") in json.dumps(fake.chat_requests[0])
    bot.state.parse_guild_member_remove({"guild_id": str(GUILD), "user": user(newcomer, "Nia")})
    bot.state.parse_guild_member_add(member_add(GUILD, member(newcomer, "Nia")))
    await settle()
    assert len(bot.api.sent(bot.api.dm_channels[newcomer])) == 1  # welcomed once


async def test_no_welcome_when_off_and_closed_dms_are_only_logged(bot, fake, caplog):
    mod = await bot.slash(
        MOD, "admin", subcommand("welcome", enabled=(BOOLEAN, False)), permissions=MANAGE_GUILD
    )
    assert bot.answers(mod) == ["New members no longer get a welcome."]
    bob = await bot.slash(BOB, "admin", subcommand("welcome", enabled=(BOOLEAN, True)))
    assert bot.answers(bob) == [NOT_ADMIN]
    assert await bot.members.tenant_settings(TENANT) == {"welcome": False}
    bot.state.parse_guild_member_add(member_add(GUILD, member(1_100_000_000_000_000_051, "Q")))
    await settle()
    assert fake.requests == [] and not bot.api.find("POST", "/users/@me/channels")

    await bot.members.tenant_settings(TENANT, welcome=True)
    closed = 1_100_000_000_000_000_052
    bot.api.dm_channels[closed] = 1_100_000_000_000_000_053
    bot.api.closed_dms.add(closed)
    with caplog.at_level(logging.INFO, logger="adapters.discord.client"):
        bot.state.parse_guild_member_add(member_add(GUILD, member(closed, "Shy")))
        await settle()
    assert "takes no DMs" in caplog.text
    assert bot.api.find("POST", f"/channels/{bot.api.dm_channels[closed]}/messages")


# Slash commands: members


async def test_memory_show_and_export(bot):
    await bot.say(ANN, "remember that I sail on Sundays", DM, dm=True)
    shown = await bot.slash(ANN, "memory", subcommand("show"))
    (callback,) = bot.api.callbacks(shown)
    assert callback.body["type"] == 4 and callback.body["data"]["flags"] & EPHEMERAL
    assert "**human**" in callback.body["data"]["content"]
    assert "I sail on Sundays" in callback.body["data"]["content"]

    exported = await bot.slash(ANN, "memory", subcommand("export"))
    (deferred,) = bot.api.callbacks(exported)
    assert deferred.body["type"] == 5 and deferred.body["data"]["flags"] & EPHEMERAL
    (followup,) = bot.api.followups(exported)
    assert followup.body["flags"] & EPHEMERAL
    doc = json.loads(followup.files[f"memory-{ANN}.json"])
    assert any("I sail on Sundays" in (m["content"] or "") for m in doc["messages"])

    nobody = await bot.slash(BOB, "memory", subcommand("show"), in_dm=True)
    assert "don't have any memory of you" in bot.answers(nobody)[0]


async def test_forget_needs_the_button_and_erases_only_that_member(bot, sessions, clock):
    await bot.mention(ANN, "remember that my PIN hint is heron")
    await bot.mention(BOB, "remember that I like jazz")
    browsers = await signed_in(sessions, clock, TENANT, str(ANN), str(BOB))
    bob_before = await bot.members.view(TENANT, str(BOB))
    asked = await bot.slash(ANN, "memory", subcommand("forget"))
    assert bot.answers(asked) == [FORGET_ASK]
    assert await bot.members.view(TENANT, str(ANN)) is not None  # nothing happens yet

    await bot.click(BOB, asked, "Erase")  # not Bob's button
    assert await bot.members.view(TENANT, str(ANN)) is not None

    clicked = await bot.click(ANN, asked, "Erase")
    assert bot.api.callbacks(clicked)[0].body["type"] == 6  # deferred update of that message
    (edit,) = bot.api.edits(clicked)
    assert edit.body["content"] == FORGET_DONE and edit.body["components"] == []
    assert await bot.members.view(TENANT, str(ANN)) is None
    bob_after = await bot.members.view(TENANT, str(BOB))
    assert (
        bob_after == bob_before and "jazz" in dict((b[0], b[1]) for b in bob_after.blocks)["human"]
    )
    # Issue 27, finding 4: Ann's browser is signed out by the same erase; Bob's is not.
    assert await still_signed_in(browsers) == {str(BOB)}


async def test_forget_can_be_cancelled(bot):
    await bot.mention(ANN, "hello")
    asked = await bot.slash(ANN, "memory", subcommand("forget"))
    clicked = await bot.click(ANN, asked, "Cancel")
    assert bot.api.callbacks(clicked)[0].body["type"] == 7
    assert await bot.members.view(TENANT, str(ANN)) is not None


async def test_an_unanswered_question_lapses(bot, monkeypatch):
    monkeypatch.setattr(Confirm, "WAIT", 0.1)
    await bot.mention(ANN, "hello")
    asked = await bot.slash(ANN, "memory", subcommand("forget"))
    (edit,) = await bot.api.wait_for(lambda: bot.api.edits(asked))
    assert edit.body["content"] == LAPSED and edit.body["components"] == []
    assert await bot.members.view(TENANT, str(ANN)) is not None


async def test_member_settings(bot):
    off = await bot.slash(ANN, "openers", {"name": "setting", "type": STRING, "value": "off"})
    assert bot.answers(off)[0].startswith("Openers off")
    quiet = await bot.slash(ANN, "quiet-hours", {"name": "hours", "type": STRING, "value": "23-7"})
    assert "23:00-07:00" in bot.answers(quiet)[0]
    tz = await bot.slash(
        ANN, "timezone", {"name": "zone", "type": STRING, "value": "Europe/Berlin"}
    )
    assert "Europe/Berlin" in bot.answers(tz)[0]
    view = await bot.members.view(TENANT, str(ANN))
    assert view.settings["openers"] is False and view.settings["quiet_hours"] == "23:00-07:00"
    assert view.timezone == "Europe/Berlin" and view.settings["timezone_from"] == "member"

    typing = command(
        APP_ID,
        guild_member(ANN),
        "timezone",
        [{"name": "zone", "type": STRING, "value": "berl", "focused": True}],
        guild_id=GUILD,
        channel_id=GENERAL,
    )
    typing["type"] = 4  # APPLICATION_COMMAND_AUTOCOMPLETE while the member types
    bot.state.parse_interaction_create(typing)
    await settle()
    (suggested,) = bot.api.callbacks(typing)
    assert suggested.body["type"] == 8
    assert {"name": "Europe/Berlin", "value": "Europe/Berlin"} in suggested.body["data"]["choices"]

    bad = await bot.slash(ANN, "timezone", {"name": "zone", "type": STRING, "value": "Mars/Base"})
    (callback,) = bot.api.callbacks(bad)
    assert callback.body["data"]["flags"] & EPHEMERAL
    assert "'Mars/Base' is not a time zone" in callback.body["data"]["content"]
    assert (await bot.members.view(TENANT, str(ANN))).timezone == "Europe/Berlin"


async def test_memory_web_answers_a_private_link_to_the_members_own_memory(bot):
    await bot.mention(ANN, "hello")
    asked = await bot.slash(ANN, "memory", subcommand("web"))
    (callback,) = bot.api.callbacks(asked)
    assert callback.body["data"]["flags"] & EPHEMERAL
    text = callback.body["data"]["content"]
    assert "works once, for 15 minutes" in text
    link = re.search(r"<(https://companion\.example/signin\?token=[^>]+)>", text).group(1)
    grant = await bot.services.access.check(link.split("token=")[1])
    assert (grant.tenant, grant.member, grant.actor) == (TENANT, str(ANN), str(ANN))


# Slash commands: admins


async def test_admin_web_links_only_admins_to_the_communitys_pages(bot):
    refused = await bot.slash(BOB, "admin", subcommand("web"))
    assert bot.answers(refused) == [NOT_ADMIN]
    asked = await bot.slash(MOD, "admin", subcommand("web"), permissions=MANAGE_GUILD)
    (callback,) = bot.api.callbacks(asked)
    assert callback.body["data"]["flags"] & EPHEMERAL
    link = re.search(r"<([^>]+)>", callback.body["data"]["content"]).group(1)
    grant = await bot.services.access.check(link.split("token=")[1])
    assert (grant.tenant, grant.member, grant.actor) == (TENANT, None, str(MOD))


def admin_export(target: int) -> dict[str, Any]:
    return subcommand("export", member=(USER, str(target)))


async def test_admin_export_is_refused_without_manage_server(bot):
    await bot.mention(ANN, "remember that I like tea")
    for permissions in (0, 0x400 | 0x800):  # nothing; view and send messages
        refused = await bot.slash(
            BOB, "admin", admin_export(ANN), permissions=permissions, resolved=resolved_member(ANN)
        )
        (callback,) = bot.api.callbacks(refused)
        assert callback.body["data"]["content"] == NOT_ADMIN
        assert callback.body["data"]["flags"] & EPHEMERAL
        assert not bot.api.followups(refused)
    assert await bot.members.audit_log(TENANT) == []


async def test_admin_export_by_a_manager_sends_the_file_and_is_audited(bot):
    await bot.mention(ANN, "remember that I like tea")
    exported = await bot.slash(
        MOD, "admin", admin_export(ANN), permissions=MANAGE_GUILD, resolved=resolved_member(ANN)
    )
    (followup,) = bot.api.followups(exported)
    assert followup.body["flags"] & EPHEMERAL
    doc = json.loads(followup.files[f"memory-{ANN}.json"])
    assert any("I like tea" in (m["content"] or "") for m in doc["messages"])
    (entry,) = await bot.members.audit_log(TENANT)
    assert (entry.actor, entry.action, entry.target) == (str(MOD), "export", str(ANN))

    by_id = await bot.slash(OPERATOR, "admin", admin_export(ANN), resolved=resolved_member(ANN))
    assert bot.api.followups(by_id)  # a configured admin id needs no Discord permission
    assert [e.actor for e in await bot.members.audit_log(TENANT)] == [str(OPERATOR), str(MOD)]

    gone = 1_100_000_000_000_000_060  # left the server: Discord resolves only the user
    departed = {"users": {str(gone): user(gone, "Gil")}}
    asked = await bot.slash(
        MOD, "admin", admin_export(gone), permissions=MANAGE_GUILD, resolved=departed
    )
    assert bot.answers(asked)[-1] == "I have no memory of Gil."
    latest = (await bot.members.audit_log(TENANT))[0]
    assert (latest.target, latest.detail["found"]) == (str(gone), False)


async def test_admin_reset_asks_first_and_is_audited(bot):
    await bot.mention(ANN, "remember that I like tea")
    await bot.mention(BOB, "remember that I like coffee")
    refused = await bot.slash(
        BOB, "admin", subcommand("reset", member=(USER, str(ANN))), resolved=resolved_member(ANN)
    )
    assert bot.answers(refused) == [NOT_ADMIN]

    asked = await bot.slash(
        MOD,
        "admin",
        subcommand("reset", member=(USER, str(ANN))),
        permissions=MANAGE_GUILD,
        resolved=resolved_member(ANN),
    )
    assert "Are you sure?" in bot.answers(asked)[0]
    assert await bot.members.view(TENANT, str(ANN)) is not None
    assert await bot.members.audit_log(TENANT) == []

    clicked = await bot.click(MOD, asked, "Erase", permissions=MANAGE_GUILD)
    assert bot.api.edits(clicked)[0].body["content"] == "Done: Ann's memory is erased."
    ann = await bot.members.view(TENANT, str(ANN))
    assert ann is None or (ann.messages == 0 and "tea" not in json.dumps(ann.blocks))
    bob = await bot.members.view(TENANT, str(BOB))
    assert bob.messages > 0 and "coffee" in json.dumps(bob.blocks)
    (entry,) = await bot.members.audit_log(TENANT)
    assert (entry.actor, entry.action, entry.target) == (str(MOD), "reset", str(ANN))


async def test_the_inspector_asks_discord_whether_an_admin_still_is_one(bot):
    """Issue 27, finding 7: an admin session is re-checked against the server's roles."""
    from adapters.discord.commands import admin_rights

    check = admin_rights(bot.client, frozenset({str(OPERATOR)}))
    assert await check(TENANT, str(MOD)) is True  # Manage Server through a role
    assert await check(TENANT, str(OWNER)) is True
    assert await check(TENANT, str(OPERATOR)) is True  # COMPANION_ADMIN_IDS
    assert await check(TENANT, str(ANN)) is False
    assert await check("discord:1", str(MOD)) is None  # a server this client does not see


async def test_admins_name_their_companion_and_give_it_instructions(bot, fake):
    refused = await bot.slash(BOB, "admin", subcommand("companion", name=(STRING, "Evil")))
    assert bot.answers(refused) == [NOT_ADMIN]
    said = await bot.slash(
        MOD,
        "admin",
        subcommand(
            "companion",
            name=(STRING, "Captain"),
            instructions=(STRING, "This server is about sailing. Never discuss politics."),
        ),
        permissions=MANAGE_GUILD,
    )
    assert bot.answers(said) == [
        "Saved: your community's companion is now called Captain.\n"
        "Saved: every member's companion follows these instructions from its next answer "
        "(53 of 4000 characters)."
    ]
    (renamed,) = bot.api.find("PATCH", rf"/guilds/{GUILD}/members/@me")
    assert renamed.body == {"nick": "Captain"}  # its name in the member list follows
    await bot.say(ANN, "hello", DM, dm=True)
    system = fake.chat_requests[-1]["messages"][0]["content"]
    assert "Your name in this community is Captain." in system
    assert "Never discuss politics." in system

    too_long = await bot.slash(
        MOD, "admin", subcommand("companion", name=(STRING, "x" * 41)), permissions=MANAGE_GUILD
    )
    assert "over its limit of 40" in bot.answers(too_long)[0]
    shown = await bot.slash(MOD, "admin", subcommand("companion"), permissions=MANAGE_GUILD)
    assert "**Name:** Captain" in bot.answers(shown)[0]
    bot.api.nick_refused = True
    said = await bot.slash(
        MOD, "admin", subcommand("companion", name=(STRING, "Cap")), permissions=MANAGE_GUILD
    )
    assert "Saved: your community's companion is now called Cap." in bot.answers(said)[0]
    assert "Change Nickname permission" in bot.answers(said)[0]
    log = [(e.actor, e.action) for e in await bot.members.audit_log(TENANT)]
    assert log == [(str(MOD), "companion")] * 2


def a_channel(channel_id: int, name: str) -> dict[str, Any]:
    """`resolved` data of a channel option, as Discord sends it."""
    shown = {"id": str(channel_id), "name": name, "type": 0, "permissions": "0"}
    return {"channels": {str(channel_id): shown}}


async def place(bot, channel_id: int, name: str, mode: str) -> list[str]:
    asked = await bot.slash(
        MOD,
        "admin",
        subcommand("channel", channel=(7, str(channel_id)), mode=(STRING, mode)),
        permissions=MANAGE_GUILD,
        resolved=a_channel(channel_id, name),
    )
    return bot.answers(asked)


async def test_a_thread_missing_from_the_cache_keeps_its_channels_rules(bot, fake):
    """discord.py hands a message in a thread it has not cached (archived, a server not
    loaded yet) with a channel that names no parent: the parent is asked for, so a thread
    of a channel it never answers in stays unanswered and unstored."""
    archived = 1_100_000_000_000_000_071
    bot.api.channels[archived] = thread(archived, GUILD, GENERAL, ANN)
    await place(bot, GENERAL, "general", "never")
    await bot.mention(ANN, "hello from an old thread", channel=archived)
    assert fake.requests == [] and not bot.api.sent(archived)
    assert await bot.members.view(TENANT, str(ANN)) is None
    await place(bot, GENERAL, "general", "default")
    await bot.mention(ANN, "and now?", channel=archived)
    assert bot.api.texts(archived) == ["You said: and now?"]


async def test_admins_choose_the_channels_it_answers_in_and_turn_dms_off(bot, fake, sessions):
    elsewhere = 1_100_000_000_000_000_070
    said = await place(bot, elsewhere, "bots", "answer")
    assert said == [
        "I now answer in #bots (when addressed there). Answers in: #bots. Direct messages: on."
    ]
    await bot.mention(ANN, "are you there?")  # #general is not one of its channels now
    await bot.mention(BOB, "and in the thread?", channel=THREAD)
    assert fake.requests == [] and not bot.api.sent(GENERAL) and not bot.api.sent(THREAD)
    assert await bot.members.view(TENANT, str(ANN)) is None  # not stored either

    await place(bot, GENERAL, "general", "answer")  # two channels now
    await bot.mention(ANN, "now?")
    assert bot.api.texts(GENERAL) == ["You said: now?"]
    await bot.mention(BOB, "in the thread of general", channel=THREAD)
    assert bot.api.texts(THREAD) == ["You said: in the thread of general"]

    await bot.say(ANN, "no mention here")
    assert len(bot.api.sent(GENERAL)) == 1
    said = await place(bot, GENERAL, "general", "open")
    assert "Every message in #general is now for me" in said[0]
    await bot.say(ANN, "no mention needed")
    assert bot.api.texts(GENERAL)[-1] == "You said: no mention needed"

    await place(bot, GENERAL, "general", "never")
    await bot.mention(ANN, "hello?")
    assert bot.api.texts(GENERAL)[-1] == "You said: no mention needed"

    off = await bot.slash(
        MOD, "admin", subcommand("dms", enabled=(BOOLEAN, False)), permissions=MANAGE_GUILD
    )
    assert "Direct messages: off." in bot.answers(off)[0]
    asked = len(fake.chat_requests)
    await bot.say(ANN, "psst", DM, dm=True)
    assert bot.api.texts(DM) == [DMS_OFF] and len(fake.chat_requests) == asked
    log = [(e.actor, e.action) for e in await bot.members.audit_log(TENANT)]
    assert log == [(str(MOD), "where")] * 5


async def test_a_blocked_member_is_told_once_and_keeps_their_memory(bot, fake, clock):
    await bot.say(ANN, "remember that I sail on Sundays", DM, dm=True)
    before = (await bot.members.view(TENANT, str(ANN))).messages

    async def planned() -> list[str]:
        return [o.user for o in await bot.members.scheduled_openers(clock.now)]

    assert str(ANN) in await planned()
    refused = await bot.slash(
        BOB, "admin", subcommand("block", member=(USER, str(ANN))), resolved=resolved_member(ANN)
    )
    assert bot.answers(refused) == [NOT_ADMIN]
    blocked = await bot.slash(
        MOD,
        "admin",
        subcommand("block", member=(USER, str(ANN))),
        permissions=MANAGE_GUILD,
        resolved=resolved_member(ANN),
    )
    assert "Ann is now blocked" in bot.answers(blocked)[0]
    asked = len(fake.chat_requests)
    await bot.mention(ANN, "hello?")
    await bot.mention(ANN, "hello??")
    await bot.say(ANN, "anyone?", DM, dm=True)
    assert bot.api.texts(GENERAL) == [BLOCKED_NOTICE]  # told once, in all
    assert len(fake.chat_requests) == asked
    view = await bot.members.view(TENANT, str(ANN))
    assert "Sundays" in str(view.blocks) and view.messages == before  # kept, nothing added
    assert [b.user for b in await bot.members.admission.blocked(TENANT)] == [str(ANN)]
    assert str(ANN) not in await planned()  # openers stop

    await bot.slash(
        MOD,
        "admin",
        subcommand("unblock", member=(USER, str(ANN))),
        permissions=MANAGE_GUILD,
        resolved=resolved_member(ANN),
    )
    assert str(ANN) in await planned()
    await bot.mention(ANN, "back again")
    assert bot.api.texts(GENERAL)[-1] == "You said: back again"
    log = [(e.action, e.target) for e in await bot.members.audit_log(TENANT)]
    assert log[:2] == [("unblock", str(ANN)), ("block", str(ANN))]


CAT = "A ginger cat asleep on a blue sofa, one paw over its nose."


def recalls_pictures(body):
    if not body.get("tools"):
        return default_brain(body)
    if body["messages"][-1]["role"] != "tool" and "photo of my cat" in person_said(body)[-1]:
        return calls(tool_call("archival_memory_search", query="cat sofa"))
    return default_brain(body)


async def test_a_shared_photo_is_seen_remembered_and_recalled_later(bot, fake, sessions, clock):
    photo = png()
    fake.pictures[photo] = CAT
    fake.brain = recalls_pictures
    bot.api.files["miso.png"] = photo
    shared = [attachment(bot.api.file_url("miso.png"), "miso.png", len(photo))]
    await bot.mention(ANN, "look at Miso!", attachments=shared)
    (looked,) = [r for r in fake.requests if not r.get("tools")]
    part = looked["messages"][1]["content"][1]
    assert part["type"] == "image_url" and part["image_url"]["detail"] == "low"
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
    turn = fake.chat_requests[-1]
    said = turn["messages"][-1]["content"]  # the words, then what it saw, in one message
    assert said.index("look at Miso!") < said.index(f"it shows: {CAT}")
    assert bot.api.texts(GENERAL)[-1].startswith("You said: look at Miso!")

    scope = await bot.client.services.engine.agent(TENANT, str(ANN))
    async with sessions() as session:
        (kept,) = await session.scalars(select(Passage).where(Passage.agent_id == scope.agent_id))
        assert kept.source == "picture miso.png" and CAT in kept.text
        stored = json.dumps(
            [list(row) for row in (await session.execute(select(Event.payload))).all()]
        )
    assert base64.b64encode(photo).decode()[:40] not in stored  # the bytes are not kept

    await bot.mention(ANN, "again", attachments=shared)  # the same file, redelivered
    assert len([r for r in fake.requests if not r.get("tools")]) == 1
    clock.advance(days=120)
    await bot.mention(ANN, "do you remember the photo of my cat?")
    assert "ginger cat asleep on a blue sofa" in bot.api.texts(GENERAL)[-1]
    doc = await bot.members.export(TENANT, str(ANN))
    assert any(CAT in p["text"] for p in doc["passages"])  # export covers it
    await bot.members.forget(TENANT, str(ANN))
    async with sessions() as session:
        assert not list(
            await session.scalars(select(Passage).where(Passage.text.contains("ginger")))
        )


async def test_a_text_only_model_gets_one_kind_notice_and_the_words_go_on(bot, fake):
    fake.vision = False
    for n in (1, 2):
        bot.api.files[f"p{n}.png"] = png(n)
    shared = [attachment(bot.api.file_url(f"p{n}.png"), f"p{n}.png", len(png(n))) for n in (1, 2)]
    await bot.mention(ANN, "my garden today", attachments=shared)
    texts = bot.api.texts(GENERAL)
    assert texts == [
        "I can't see pictures here, sorry: the model I run on reads only text. If you tell me "
        "in words what p1.png shows, I'll happily remember it.",
        texts[-1],
    ]
    assert texts[-1].startswith("You said: my garden today")
    looked = [r for r in fake.requests if not r.get("tools")]
    assert len(looked) == 1  # refused once, remembered: the second picture is not sent
    await bot.mention(ANN, "and tomorrow's", attachments=shared[:1])
    assert bot.api.texts(GENERAL)[-1].startswith("You said: and tomorrow's")
    assert len(bot.api.texts(GENERAL)) == 3  # told once, not again
    assert len([r for r in fake.requests if not r.get("tools")]) == 1
    # Not a setup error: /readyz still says the model is fine.
    assert bot.client.services.engine.mind.health.state()[0] == "ok"


async def test_admins_lower_the_servers_limits_and_say_what_welcomes_say(bot, fake):
    said = await bot.slash(
        MOD,
        "admin",
        subcommand("welcome_text", text=(STRING, "Start in #introductions.")),
        permissions=MANAGE_GUILD,
    )
    assert "every welcome will say this" in bot.answers(said)[0]
    newcomer = 1_100_000_000_000_000_060
    bot.state.parse_guild_member_add(member_add(GUILD, member(newcomer, "Nia")))
    await settle()
    assert "Start in #introductions." in json.dumps(fake.requests[-1])
    asked = await bot.slash(
        MOD, "admin", subcommand("limits", messages=(STRING, "45")), permissions=MANAGE_GUILD
    )
    assert "can be at most 30, the operator's ceiling" in bot.answers(asked)[0]
    asked = await bot.slash(
        MOD, "admin", subcommand("limits", messages=(STRING, "2")), permissions=MANAGE_GUILD
    )
    assert (
        "messages one member may send per hour: 2 (the operator's ceiling: 30)"
        in (bot.answers(asked)[0])
    )
    for n in range(3):
        await bot.mention(ANN, f"note {n}")
    assert bot.api.texts(GENERAL) == [
        "You said: note 0",
        "You said: note 1",
        RATE_REPLY.format(limit=2, window="hour"),
    ]
    await bot.slash(
        MOD,
        "admin",
        subcommand("limits", community_tokens=(STRING, "10")),
        permissions=MANAGE_GUILD,
    )
    await bot.mention(BOB, "hello")
    assert bot.api.texts(GENERAL)[-1] == BUDGET_REPLY.format(whose=" for this community")

    log = [e.action for e in await bot.members.audit_log(TENANT)]
    assert log[:3] == ["limits", "limits", "settings"]


async def test_a_picture_that_is_not_one_or_too_big_is_refused_and_the_words_go_on(bot, fake):
    bot.api.files["cat.png"] = b"MZ\x90\x00" + bytes(60)  # a program named like a picture
    shared = [
        attachment(bot.api.file_url("cat.png"), "cat.png", 64),
        attachment(bot.api.file_url("huge.jpg"), "huge.jpg", 6_000_000),
    ]
    await bot.mention(ANN, "two pictures", attachments=shared)
    assert bot.api.texts(GENERAL) == [
        "cat.png is not a PNG, JPEG, WebP or GIF picture I can open",
        "huge.jpg is 6.0 MB; the most I take is 5 MB",
        "You said: two pictures",
    ]
    assert [c.path for c in bot.api.find("GET", r"/attachments/.*")] == ["/attachments/cat.png"]
    assert [r for r in fake.requests if not r.get("tools")] == []  # no picture was shown


async def test_an_attachment_whose_address_is_not_discords_is_not_fetched(bot, sessions):
    """An attachment pointing off Discord's CDN is never fetched: the member hears which
    file, and the words beside it are answered."""
    async with elsewhere() as (address, asked):
        off = attachment(f"{address}/notes.txt", "notes.txt", 17)
        await bot.mention(ANN, "read this", attachments=[off])
    assert asked == []
    texts = bot.api.texts(GENERAL)
    assert any("notes.txt" in t and "Discord" in t for t in texts), texts
    assert texts[-1] == "You said: read this"
    async with sessions() as session:
        assert list(await session.scalars(select(Passage.text))) == []
