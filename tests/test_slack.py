"""Slack through Bolt's own dispatch, with real Events API and slash-command payloads,
against a local stand-in for Slack's Web API."""

import json
import re

import pytest
from sqlalchemy import select

from adapters.common import FORGET_DONE, NOT_ADMIN, Services
from core.members.admission import BLOCKED_NOTICE, DMS_OFF
from core.members.community import Community
from core.models import Passage
from core.runtime.budgets import BUDGET_REPLY
from core.tenants.access import Access
from tests.fake_openai import last_user_text, png, say
from tests.fake_slack import BOT_USER, TEAM
from tests.rigs import elsewhere, slack_envelope, slack_message, slack_rig, slack_ts


@pytest.fixture
async def slack(engine, members, sessions, clock):
    access = Access(sessions, clock, "https://companion.example")
    community = Community(sessions, engine.mind.config, clock)
    services = Services(engine, members, frozenset({"UOPS"}), access=access, community=community)
    async with slack_rig(services, users=("U1", "U2"), admins=("UADMIN",)) as rig:
        yield rig


async def test_dm_is_answered_with_a_working_indicator(slack, fake):
    api = slack.api
    response = await slack.dispatch(slack_message(text="hello there"))
    assert response.status == 200
    replies = slack.posted()
    assert [r["text"] for r in replies] == ["You said: hello there"]
    assert replies[0]["channel"] == "D1" and replies[0].get("thread_ts") is None
    assert api.called("reactions.add") and api.called("reactions.remove")


async def test_mention_in_channel_is_answered_in_its_thread(slack, fake):
    event = {
        "type": "app_mention",
        "channel": "C9",
        "user": "U1",
        "ts": "1700000001.000200",
        "text": f"<@{BOT_USER}> how are you?",
        "event_ts": "1700000001.000200",
    }
    await slack.dispatch(slack_envelope(event))
    reply = slack.posted()[-1]
    assert reply["channel"] == "C9" and reply["thread_ts"] == "1700000001.000200"
    assert reply["text"] == "You said: how are you?"


async def test_follow_up_in_the_thread_of_a_mention_needs_no_new_mention(slack, fake):
    called = slack_envelope(
        {
            "type": "app_mention",
            "channel": "C9",
            "user": "U1",
            "ts": "1700000005.000100",
            "text": f"<@{BOT_USER}> the plants need care",
        }
    )
    await slack.dispatch(called)

    def reply(user: str, text: str, thread: str = "1700000005.000100", parent: str = "U1"):
        extra = {"thread_ts": thread, "parent_user_id": parent}
        return slack_message(user=user, text=text, channel="C9", channel_type="channel", **extra)

    await slack.dispatch(reply("U1", "and water them on Sunday"))
    await slack.dispatch(reply("U2", "what plants?"))  # someone else in the member's thread
    await slack.dispatch(reply("U1", "my own thread", thread="1700000009.000100"))
    answers = [(r["text"], r.get("thread_ts")) for r in slack.posted()]
    assert answers == [
        ("You said: the plants need care", "1700000005.000100"),
        ("You said: and water them on Sunday", "1700000005.000100"),
    ]


async def test_channel_chatter_without_mention_is_ignored(slack, fake):
    await slack.dispatch(slack_message(text="just chatting", channel="C9", channel_type="channel"))
    assert slack.posted() == [] and fake.requests == []


async def test_bots_are_never_answered(slack, fake):
    await slack.dispatch(slack_message(text="beep", bot_id="B2"))
    await slack.dispatch(slack_message(text="edit", subtype="message_changed"))
    assert slack.posted() == [] and fake.requests == []


async def test_forged_signature_is_refused(slack, fake):
    response = await slack.dispatch(slack_message(text="let me in"), secret="wrong")
    assert response.status == 401
    assert slack.posted() == [] and fake.requests == []


async def test_retried_event_is_answered_once(slack, fake):
    payload = slack_message(text="only once please")
    await slack.dispatch(payload)
    retry = {"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}
    assert (await slack.dispatch(payload, retry)).status == 200
    assert [r["text"] for r in slack.posted()] == ["You said: only once please"]
    assert len(fake.chat_requests) == 1


async def test_long_reply_is_split_with_code_intact(slack, fake):
    code = "```python\n" + "\n".join(f"print({i})" for i in range(400)) + "\n```"
    fake.brain = lambda body: say("**Here** it is:\n" + code)
    await slack.dispatch(slack_message(text="code please"))
    parts = [r["text"] for r in slack.posted()]
    assert len(parts) > 1 and all(len(p) <= 3000 for p in parts)
    assert parts[0].startswith("*Here* it is:")
    assert all(p.count("```") % 2 == 0 for p in parts)


async def test_group_thread_memory_stays_with_each_speaker(slack, fake):
    fake.brain = lambda body: say("noted " + last_user_text(body))
    said = [("U1", "my dog is Rex"), ("U2", "my cat is Tom"), ("U1", "and?")]
    for n, (user, text) in enumerate(said):
        event = {
            "type": "app_mention",
            "channel": "C9",
            "user": user,
            "ts": f"17000002{n}.1",
            "text": f"<@{BOT_USER}> {text}",
        }
        await slack.dispatch(slack_envelope(event))
    u1_prompts = [json.dumps(b) for b in fake.chat_requests if "Rex" in json.dumps(b)]
    assert u1_prompts and all("Tom" not in p for p in u1_prompts)
    assert all("Rex" not in json.dumps(b) for b in fake.chat_requests if "Tom" in json.dumps(b))


async def test_shared_file_goes_to_archival_memory(slack, fake, sessions):
    api = slack.api
    api.files["notes.md"] = b"# Garden\nThe tomatoes go in the south bed."
    files = [
        {
            "id": "F1",
            "name": "notes.md",
            "size": 45,
            "url_private_download": f"{api.root}/files/notes.md",
        },
        {
            "id": "F2",
            "name": "setup.exe",
            "size": 10,
            "url_private_download": f"{api.root}/files/setup.exe",
        },
    ]
    await slack.dispatch(slack_message(text="", subtype="file_share", files=files))
    async with sessions() as session:
        texts = list(await session.scalars(select(Passage.text)))
    assert texts == ["# Garden\nThe tomatoes go in the south bed."]
    sent = [r["text"] for r in slack.posted()]
    assert any("setup.exe" in t and "I take" in t for t in sent)
    assert any(c["auth"] == "Bearer xoxb-test" for n, c in api.calls if n == "download")


async def test_team_join_gets_a_welcome_dm_unless_turned_off(slack, fake):
    members = slack.members
    join = slack_envelope(
        {
            "type": "team_join",
            "user": {"id": "U7", "team_id": TEAM, "real_name": "Ines", "is_bot": False},
        }
    )
    fake.brain = lambda body: say("Welcome, Ines!")
    await slack.dispatch(join)
    assert [(r["channel"], r["text"]) for r in slack.posted()] == [("DU7", "Welcome, Ines!")]
    await members.tenant_settings(f"slack:{TEAM}", welcome=False)
    join["event"]["user"]["id"] = "U8"
    await slack.dispatch(join)
    assert len(slack.posted()) == 1


async def test_member_commands(slack, fake):
    api, members = slack.api, slack.members
    await slack.dispatch(slack_message(text="remember that I grow tomatoes"))
    shown = (await slack.command("memory"))[-1]
    assert "I grow tomatoes" in shown["text"] and shown["response_type"] == "ephemeral"
    await slack.command("export")
    upload = api.called("files.completeUploadExternal")[-1]
    assert upload["channel_id"] == "DU1"
    doc = json.loads(next(iter(api.uploads.values())))
    assert any("tomatoes" in (m["content"] or "") for m in doc["messages"])
    assert "Openers are off" in (await slack.command("openers off"))[-1]["text"]
    assert "23:00-07:00" in (await slack.command("quiet 23-7"))[-1]["text"]
    assert "not a time zone" in (await slack.command("timezone Nowhere/City"))[-1]["text"]
    view = await members.view(f"slack:{TEAM}", "U1")
    assert view.settings["openers"] is False and view.settings["quiet_hours"] == "23:00-07:00"


async def test_time_zone_comes_from_the_slack_profile_unless_set(slack, fake):
    api, members = slack.api, slack.members
    await slack.dispatch(slack_message(text="hi"))
    assert (await members.view(f"slack:{TEAM}", "U1")).timezone == "Europe/Berlin"
    await slack.command("timezone Asia/Tokyo")
    api.users["U1"]["tz"] = "America/Denver"
    await slack.dispatch(slack_message(text="hello again"))
    assert (await members.view(f"slack:{TEAM}", "U1")).timezone == "Asia/Tokyo"
    assert len(api.called("users.info")) == 1  # asked once, not on every message


async def test_forget_me_needs_the_askers_own_click(slack, fake, sessions, clock):
    members = slack.members
    await slack.dispatch(slack_message(user="U1", text="remember that I am U1"))
    await slack.dispatch(slack_message(user="U2", text="remember that I am U2"))
    browsers = await signed_in(sessions, clock, f"slack:{TEAM}", "U1", "U2")
    asked = (await slack.command("forget"))[-1]
    button = asked["blocks"][1]["elements"][0]
    assert await members.view(f"slack:{TEAM}", "U1") is not None
    other = (await slack.press(button["action_id"], button["value"], user="U2"))[-1]
    assert "Only the person" in other["text"]
    assert await members.view(f"slack:{TEAM}", "U2") is not None
    done = (await slack.press(button["action_id"], button["value"], user="U1"))[-1]
    assert done["text"] == FORGET_DONE
    assert await members.view(f"slack:{TEAM}", "U1") is None
    assert (await members.view(f"slack:{TEAM}", "U2")).messages > 0
    # Issue 27, finding 4: the browser U1 signed in with is signed out by the same erase.
    assert await still_signed_in(browsers) == {"U2"}


async def signed_in(sessions, clock, tenant: str, *users: str) -> dict:
    """An inspector session for each member, as their browser holds it: {user: (access, cookie)}."""
    access = Access(sessions, clock, "https://companion.example")
    found = {}
    for user in users:
        link = await access.link(tenant, user, user)
        cookie, _ = await access.redeem(link.split("token=")[1])
        found[user] = (access, cookie)
    return found


async def still_signed_in(browsers: dict) -> set[str]:
    return {user for user, (access, cookie) in browsers.items() if await access.viewer(cookie)}


async def test_admin_commands_check_the_role_and_are_audited(slack, fake):
    api, members = slack.api, slack.members
    await slack.dispatch(slack_message(user="U2", text="remember that I like kites"))
    refused = (await slack.command("admin export <@U2|u2>", user="U1"))[-1]
    assert refused["text"] == NOT_ADMIN and await members.audit_log(f"slack:{TEAM}") == []
    await slack.command("admin export <@U2|u2>", user="UADMIN")
    assert api.called("files.completeUploadExternal")[-1]["channel_id"] == "DUADMIN"
    asked = (await slack.command("admin reset <@U2>", user="UOPS"))[-1]  # COMPANION_ADMIN_IDS
    button = asked["blocks"][1]["elements"][0]
    assert (await slack.press(button["action_id"], button["value"], user="U1"))[-1][
        "text"
    ] == NOT_ADMIN
    assert await members.view(f"slack:{TEAM}", "U2") is not None
    await slack.press(button["action_id"], button["value"], user="UOPS")
    fresh = await members.view(f"slack:{TEAM}", "U2")
    assert fresh.messages == 0 and "kites" not in str(fresh.blocks)
    assert "off" in (await slack.command("admin welcome off", user="UADMIN"))[-1]["text"]
    assert NOT_ADMIN == (await slack.command("admin welcome on", user="U1"))[-1]["text"]
    assert not await app_services(members).welcome_enabled(f"slack:{TEAM}")
    log = [(e.actor, e.action, e.target) for e in await members.audit_log(f"slack:{TEAM}")]
    assert log == [
        ("UADMIN", "settings", None),
        ("UOPS", "reset", "U2"),
        ("UADMIN", "export", "U2"),
    ]


def app_services(members):
    return Services(None, members)  # type: ignore[arg-type]  (only settings are read)


async def test_app_home_shows_working_context(slack, fake):
    api = slack.api
    await slack.dispatch(slack_message(text="remember that I love jazz"))
    await slack.dispatch(
        slack_envelope({"type": "app_home_opened", "user": "U1", "tab": "home", "channel": "D1"})
    )
    view = (
        json.loads(api.called("views.publish")[-1]["view"])
        if isinstance(api.called("views.publish")[-1]["view"], str)
        else api.called("views.publish")[-1]["view"]
    )
    assert view["type"] == "home" and "I love jazz" in json.dumps(view)


async def test_web_links_are_private_and_the_admin_one_needs_the_role(slack, fake):
    access = slack.services.access
    answer = (await slack.command("web"))[-1]
    assert answer["response_type"] == "ephemeral" and answer["unfurl_links"] is False
    link = re.search(r"<(https://companion\.example/signin\?token=[^>]+)>", answer["text"])
    grant = await access.check(link.group(1).split("token=")[1])
    assert (grant.tenant, grant.member) == (f"slack:{TEAM}", "U1")
    assert (await slack.command("admin web", user="U1"))[-1]["text"] == NOT_ADMIN
    admin = (await slack.command("admin web", user="UADMIN"))[-1]
    link = re.search(r"<([^>]+)>", admin["text"]).group(1)
    grant = await access.check(link.split("token=")[1])
    assert (grant.tenant, grant.member, grant.actor) == (f"slack:{TEAM}", None, "UADMIN")
    assert "web:" in (await slack.command("help"))[-1]["text"]


async def test_admins_name_their_companion_and_give_it_instructions(slack, fake):
    tenant = f"slack:{TEAM}"
    assert (await slack.command("admin name Evil", user="U1"))[-1]["text"] == NOT_ADMIN
    said = await slack.command("admin name Captain", user="UADMIN")
    assert said[-1]["text"] == "Saved: your community's companion is now called Captain."
    rules = "This workspace is about sailing.\nNever discuss politics."
    said = await slack.command(f"admin instructions {rules}", user="UADMIN")
    assert "follows these instructions" in said[-1]["text"]
    await slack.dispatch(slack_message(text="hello"))
    system = fake.chat_requests[-1]["messages"][0]["content"]
    assert "Your name in this community is Captain." in system
    assert rules in system  # its lines kept
    persona = await slack.command("admin persona I am Captain, at sea.", user="UADMIN")
    assert "Existing members keep theirs" in persona[-1]["text"]
    view = await slack.members.view(tenant, "U1")
    assert "I am Captain" not in str(view.blocks)
    shown = await slack.command("admin companion", user="UADMIN")
    assert "Captain" in shown[-1]["text"] and "sailing" in shown[-1]["text"]
    cleared = await slack.command("admin name -", user="UADMIN")
    assert cleared[-1]["text"] == "Saved: the name is back to the default."
    log = [(e.actor, e.action) for e in await slack.members.audit_log(tenant)]
    assert log == [("UADMIN", "companion")] * 4


def mention(channel: str, text: str, user: str = "U1") -> dict:
    ts = slack_ts()
    event = {"type": "app_mention", "channel": channel, "user": user, "ts": ts, "event_ts": ts}
    return slack_envelope({**event, "text": f"<@{BOT_USER}> {text}"})


async def test_admins_choose_the_channels_it_answers_in_and_turn_dms_off(slack, fake):
    tenant = f"slack:{TEAM}"
    refused = await slack.command("admin channel <#C1|general> answer", user="U1")
    assert refused[-1]["text"] == NOT_ADMIN
    said = await slack.command("admin channel <#C1|general> answer", user="UADMIN")
    assert said[-1]["text"].startswith("I now answer in #general")
    await slack.command("admin channel <#C2|help> answer", user="UADMIN")
    await slack.dispatch(mention("C9", "over here?"))
    assert slack.posted() == [] and fake.requests == []
    await slack.dispatch(mention("C1", "in general"))
    await slack.dispatch(mention("C2", "in help"))
    assert [r["text"] for r in slack.posted()] == ["You said: in general", "You said: in help"]

    plain = slack_message(text="no mention", channel="C2", channel_type="channel")
    await slack.dispatch(plain)
    assert len(slack.posted()) == 2
    said = await slack.command("admin channel <#C2|help> open", user="UADMIN")
    assert "Every message in #help is now for me" in said[-1]["text"]
    await slack.dispatch(slack_message(text="no mention", channel="C2", channel_type="channel"))
    assert slack.posted()[-1]["text"] == "You said: no mention"

    await slack.command("admin channel <#C1|general> never", user="UADMIN")
    await slack.dispatch(mention("C1", "still there?"))
    assert len(slack.posted()) == 3

    said = await slack.command("admin dms off", user="UADMIN")
    assert "Direct messages: off." in said[-1]["text"]
    asked = len(fake.requests)
    await slack.dispatch(slack_message(text="psst"))
    assert slack.posted()[-1] == {**slack.posted()[-1], "channel": "D1", "text": DMS_OFF}
    assert len(fake.requests) == asked
    log = [(e.actor, e.action) for e in await slack.members.audit_log(tenant)]
    assert log == [("UADMIN", "where")] * 5


async def test_a_blocked_member_is_told_once_and_keeps_their_memory(slack, fake):
    tenant = f"slack:{TEAM}"
    await slack.dispatch(slack_message(text="remember that I like kites"))
    before = (await slack.members.view(tenant, "U1")).messages
    said = await slack.command("admin block <@U1|ann>", user="UADMIN")
    assert "is now blocked" in said[-1]["text"]
    posted, asked = len(slack.posted()), len(fake.requests)
    await slack.dispatch(slack_message(text="hello?"))
    await slack.dispatch(mention("C1", "hello??"))
    notices = [r["text"] for r in slack.posted()[posted:]]
    assert notices == [BLOCKED_NOTICE] and len(fake.requests) == asked
    view = await slack.members.view(tenant, "U1")
    assert "kites" in str(view.blocks) and view.messages == before
    await slack.dispatch(slack_message(user="U2", text="I am not blocked"))
    assert slack.posted()[-1]["text"] == "You said: I am not blocked"
    await slack.command("admin unblock <@U1>", user="UADMIN")
    await slack.dispatch(slack_message(text="back"))
    assert slack.posted()[-1]["text"] == "You said: back"


async def test_a_shared_photo_is_described_or_kindly_refused(slack, fake, sessions):
    api = slack.api
    api.files["kite.png"] = png(7)
    fake.pictures[png(7)] = "A red kite high over a pebble beach."
    shared = {
        "id": "F7",
        "name": "kite.png",
        "size": len(png(7)),
        "url_private_download": f"{api.root}/files/kite.png",
    }
    await slack.dispatch(slack_message(text="my new kite", subtype="file_share", files=[shared]))
    assert slack.posted()[-1]["text"].startswith("You said: my new kite")
    assert "red kite high over a pebble beach" in fake.chat_requests[-1]["messages"][-1]["content"]
    async with sessions() as session:
        assert "red kite" in (await session.scalar(select(Passage.text)))

    fake.vision = False
    api.files["sea.png"] = png(8)
    other = {
        **shared,
        "id": "F8",
        "name": "sea.png",
        "url_private_download": f"{api.root}/files/sea.png",
    }
    await slack.dispatch(
        slack_message(user="U2", text="the sea", subtype="file_share", files=[other])
    )
    texts = [r["text"] for r in slack.posted()[-2:]]
    assert texts[0].startswith("I can't see pictures here, sorry")
    assert texts[1].startswith("You said: the sea")


async def test_admins_lower_the_workspaces_budget(slack, fake):
    refused = await slack.command("admin limit community-tokens 100", user="U1")
    assert refused[-1]["text"] == NOT_ADMIN
    said = await slack.command("admin limit community-tokens 10", user="UADMIN")
    assert "model tokens the community may use per UTC day: 10" in said[-1]["text"]
    await slack.dispatch(slack_message(text="first"))  # the budget is checked before a turn
    await slack.dispatch(slack_message(user="U2", text="hello"))
    assert slack.posted()[-1]["text"] == BUDGET_REPLY.format(whose=" for this community")
    cleared = await slack.command("admin limit community-tokens -", user="UADMIN")
    assert "per UTC day: none of yours" in cleared[-1]["text"]
    shown = await slack.command("admin limits", user="UADMIN")
    assert "messages one member may send per hour" in shown[-1]["text"]
    said = await slack.command("admin welcome-text Say hi in #general", user="UADMIN")
    assert "every welcome will say this" in said[-1]["text"]


async def test_a_shared_file_larger_than_one_read_is_stored_whole(slack, fake, sessions):
    """A download arrives in many chunks over a real network: all of them are kept."""
    lines = [f"Line {n}: the ferry timetable for week {n}." for n in range(7_000)]
    body = "\n".join(lines + ["The last line: the harbour closes at midnight."])
    assert 250_000 < len(body) < 400_000  # several reads, under what one file may hold
    slack.api.files["timetable.txt"] = body.encode()
    shared = {
        "id": "FBIG",
        "name": "timetable.txt",
        "size": len(body),
        "url_private_download": f"{slack.api.root}/files/timetable.txt",
    }
    await slack.dispatch(slack_message(text="", subtype="file_share", files=[shared]))
    async with sessions() as session:
        kept = "\n".join(await session.scalars(select(Passage.text).order_by(Passage.id)))
    assert "the harbour closes at midnight" in kept, [r["text"] for r in slack.posted()]


async def test_a_file_whose_address_is_not_slacks_is_not_fetched(slack, fake, sessions):
    """A file reference pointing off Slack is never fetched (no request, no bot token sent
    elsewhere): the member hears which file, and the words beside it are answered."""
    async with elsewhere() as (address, asked):
        shared = {
            "id": "FOFF",
            "name": "notes.txt",
            "size": 30,
            "url_private_download": f"{address}/notes.txt",
        }
        message = slack_message(text="read this", subtype="file_share", files=[shared])
        await slack.dispatch(message)
    assert asked == []
    async with sessions() as session:
        assert list(await session.scalars(select(Passage.text))) == []
    sent = [r["text"] for r in slack.posted()]
    assert any("notes.txt" in t and "Slack" in t for t in sent), sent
    assert "You said: read this" in sent


def test_only_slacks_own_hosts_or_the_configured_api_count_as_slack():
    from adapters.slack.events import from_slack

    api = "https://slack.com/api/"
    for url in (
        "https://files.slack.com/files-pri/T1-F1/download/notes.txt",
        "https://acme.slack.com/files/U1/F1/notes.txt",
        "http://127.0.0.1:8080/files/notes.txt",  # with SLACK_API_URL on that host
    ):
        assert from_slack(url, "http://127.0.0.1:8080/api/" if "127" in url else api), url
    for url in (
        "http://files.slack.com/files-pri/T1-F1/notes.txt",  # not https
        "https://files.slack.com.evil.example/notes.txt",
        "https://evilslack.com/notes.txt",
        "https://files.slack.com@evil.example/notes.txt",
        "https://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8081/files/notes.txt",  # another port than the API's
        "file:///etc/passwd",
        "notes.txt",
    ):
        assert not from_slack(url, "http://127.0.0.1:8080/api/"), url
