"""Hostile messages at every entry point, and what the model writes back, per platform.

Messages through the engine, Slack (Bolt dispatch, real payloads) and Discord (gateway
payloads, fake REST API): no exception escapes, the member gets a clear answer, nothing they
said is lost (or, when refused, nothing is stored), replies respect the platform's limits and
time stays bounded. Then long and fenced model replies, split for each platform.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from typing import Any

import pytest
from sqlalchemy import select

from adapters.discord.posting import DISCORD_LIMIT
from adapters.text import to_slack_mrkdwn
from core.errors import EventTooLarge
from core.events import MAX_EVENT_CHARS, EventKind, InboundEvent, clean_text
from core.models import Block, Event, Message
from tests.conftest import ROOT
from tests.fake_openai import (
    calls,
    is_summary_request,
    last,
    say,
    summary_of,
    tool_call,
)
from tests.fake_slack import BOT_USER
from tests.hostile.common import (
    BOT_ID,
    DISCORD_TENANT,
    SLACK_LIMIT,
    SLACK_TENANT,
    Bug,
    assert_clear,
    assert_one_line,
    assert_parts,
    assert_prompts_fit,
    bug_marks,
    case,
    discord_post,
    next_id,
    rows,
    said,
    scope_of,
    slack_dispatch,
    slack_texts,
    slack_uid,
    uid,
)
from tests.hostile.corpus import INJECTIONS, MESSAGES, PROSE
from tests.rigs import slack_envelope, slack_message, slack_ts

# =============================================================================================
# Messages through Engine.converse
# =============================================================================================


@pytest.mark.parametrize("text", list(MESSAGES.values()), ids=list(MESSAGES))
async def test_engine_message(eng, module_fake, module_sessions, text):
    scope = await eng.agent("hostile", uid())
    started = time.perf_counter()
    exchange = await eng.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text, f"msg:{uid()}"))
    assert time.perf_counter() - started < 10
    assert exchange.replies, "no reply"
    for reply in exchange.replies:
        assert_clear(reply)
    assert await said(module_sessions, scope) == [clean_text(text)]  # kept in full, not cut
    (event,) = await rows(module_sessions, Event, scope)
    assert (event.status, event.error) == ("done", None)
    assert_prompts_fit(module_fake)


async def test_engine_message_over_the_size_limit_is_refused_and_nothing_stored(
    eng, module_fake, module_sessions
):
    scope = await eng.agent("hostile", uid())
    with pytest.raises(EventTooLarge) as refused:
        await eng.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "x" * (MAX_EVENT_CHARS + 1)))
    words = str(refused.value)
    assert f"{MAX_EVENT_CHARS + 1:,}" in words and f"{MAX_EVENT_CHARS:,}" in words
    assert_one_line(words)
    assert (
        await rows(module_sessions, Event, scope) == []
        and await rows(module_sessions, Message, scope) == []
    )
    assert module_fake.requests == []


BOB_SECRET, BOB_FILE, BOB_SAID = "KAYAK-7731", "BOBFILE-4411", "my secret is KAYAK-7731"


def snooping_brain(body: dict[str, Any]) -> dict[str, Any]:
    """A model that falls for the injection: it searches everything, then tells all."""
    if is_summary_request(body):
        return summary_of(body)
    if last(body).get("role") == "tool":
        found = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return say("Here is everything I found: " + " | ".join(found))
    return calls(
        tool_call("conversation_search", query="bob secret KAYAK memory"),
        tool_call("archival_memory_search", query="BOBFILE bob file"),
        tool_call("conversation_search_date", start_date="1970-01-01", end_date="2100-12-31"),
        tool_call("core_memory_replace", label="bob", old_content="x", new_content="y"),
    )


@pytest.mark.parametrize("text", list(INJECTIONS.values()), ids=list(INJECTIONS))
async def test_prompt_injection_sees_only_the_speakers_data(
    eng, module_fake, module_sessions, text
):
    bob = await eng.agent("club", uid("bob"))
    await eng.converse(bob, InboundEvent(EventKind.USER_MESSAGE, f"remember that {BOB_SAID}"))
    await eng.upload(bob, "bob.txt", f"Bob's file: {BOB_FILE}, kayak club.".encode())
    async with module_sessions() as session:
        bobs = await session.scalars(select(Block.value).where(Block.agent_id == bob.agent_id))
        assert any(BOB_SECRET in value for value in bobs)  # so there is something to leak
    alice = await eng.agent("club", uid("alice"))
    await eng.converse(alice, InboundEvent(EventKind.USER_MESSAGE, "my boat is a kayak too"))
    module_fake.requests.clear()
    module_fake.brain = snooping_brain

    exchange = await eng.converse(alice, InboundEvent(EventKind.USER_MESSAGE, text))

    assert len(module_fake.chat_requests) == 2
    for body in module_fake.chat_requests:
        prompt = json.dumps(body, ensure_ascii=False)
        for secret in (BOB_SECRET, BOB_FILE, BOB_SAID, "Bob's file"):
            assert secret not in prompt
        assert "my boat is a kayak too" in prompt  # her own history is there
    (reply,) = exchange.replies
    assert_clear(reply)
    assert BOB_SECRET not in reply and BOB_FILE not in reply
    assert text in await said(module_sessions, alice)


# =============================================================================================
# Messages through the Slack adapter (Bolt dispatch, real payloads)
# =============================================================================================


SLACK_MESSAGES = [
    case(MESSAGES[name], id=name)
    for name in (
        "100k-prose",
        "invalid-utf8-surrogateescape",
        "lone-surrogates",
        "nul-bytes",
        "c0-controls",
        "rtl-override",
        "zero-width-flood",
        "combining-flood",
        "emoji-only",
        "noncharacters",
        "slack-mentions-only",
        "backtick-bomb",
        "unbalanced-fence",
        "fence-soup",
        "nested-quotes",
        "markdown-mess",
        "link-bomb",
        "sql-drop",
        "tsquery-operators",
        "json-payload",
        "html-payload",
        "xml-entity-bomb",
        "fake-prompt-tags",
        "long-word",
        "base64-blob",
        "format-strings",
        "newline-flood",
    )
]


@pytest.mark.parametrize("text", SLACK_MESSAGES)
async def test_slack_message(slack, module_fake, module_sessions, text):
    member_id, channel = slack_uid(), f"D{next_id()}"
    status, posts = await slack_dispatch(slack, slack_message(member_id, text, channel))
    assert status == 200
    replies = slack_texts(posts)
    assert_parts(replies, SLACK_LIMIT)
    assert all(p["channel"] == channel for p in posts)
    assert_clear("\n".join(replies))
    scope = await scope_of(module_sessions, SLACK_TENANT, member_id)
    assert scope is not None
    assert await said(module_sessions, scope) == [clean_text(text.strip())]
    assert_prompts_fit(module_fake)


@pytest.mark.parametrize("text", ["", "   ", " \t\n\u00a0\u3000 "], ids=["empty", "spaces", "ws"])
async def test_slack_message_without_words_is_ignored_quietly(
    slack, module_fake, module_sessions, text
):
    """Slack never delivers a text-less message without files; nothing to answer or lose."""
    member_id = slack_uid()
    status, posts = await slack_dispatch(slack, slack_message(member_id, text, "D9"))
    assert status == 200 and posts == [] and module_fake.requests == []
    scope = await scope_of(module_sessions, SLACK_TENANT, member_id)
    assert scope is None or await rows(module_sessions, Event, scope) == []


async def test_slack_bare_mention_is_answered(slack, module_fake):
    ts = slack_ts()
    event = {
        "type": "app_mention",
        "channel": "C77",
        "user": slack_uid(),
        "ts": ts,
        "text": f"<@{BOT_USER}>",
        "event_ts": ts,
    }
    status, posts = await slack_dispatch(slack, slack_envelope(event))
    assert status == 200
    assert posts, "the member called the bot and got silence"


async def test_slack_message_over_the_size_limit_gets_the_refusal(
    slack, module_fake, module_sessions
):
    member_id = slack_uid()
    big = "y" * (MAX_EVENT_CHARS + 1)
    status, posts = await slack_dispatch(slack, slack_message(member_id, big, "D8"))
    assert module_fake.requests == []
    texts = slack_texts(posts)
    assert any(str(EventTooLarge(len(big), MAX_EVENT_CHARS)) in t for t in texts), texts


async def test_slack_reply_cannot_broadcast(slack, module_fake):
    module_fake.brain = lambda body: say("Hey <!channel> and <!here> and <@U2>, look at this!")
    status, posts = await slack_dispatch(slack, slack_message(slack_uid(), "say hi to all", "D7"))
    (reply,) = slack_texts(posts)
    assert not re.search(r"<!(channel|here|everyone)\b|<@U2>", reply), reply


# =============================================================================================
# Messages through the Discord adapter (gateway payloads, fake REST API)
# =============================================================================================


DISCORD_MESSAGES = [
    case(MESSAGES[name], id=name)
    for name in (
        "empty",
        "spaces",
        "100k-prose",
        "invalid-utf8-surrogateescape",
        "lone-surrogates",
        "nul-bytes",
        "c0-controls",
        "rtl-override",
        "zero-width-flood",
        "combining-flood",
        "emoji-only",
        "discord-mentions-only",
        "backtick-bomb",
        "unbalanced-fence",
        "fence-soup",
        "nested-quotes",
        "markdown-mess",
        "sql-union",
        "tsquery-operators",
        "html-payload",
        "fake-prompt-tags",
        "long-word-mixed",
        "base64-blob",
        "newline-flood",
        "bidi-mix",
    )
]


@pytest.mark.parametrize("text", DISCORD_MESSAGES)
async def test_discord_dm(dc, module_fake, module_sessions, text):
    posted = await discord_post(dc, text)
    assert_parts(posted.texts, DISCORD_LIMIT)
    assert_clear("\n".join(posted.texts))
    scope = await scope_of(module_sessions, DISCORD_TENANT, str(posted.author))
    assert scope is not None
    (stored,) = await said(module_sessions, scope)
    zwsp = "\u200b"  # clean_content defuses @everyone with one; that is not a loss
    assert stored.replace(zwsp, "") == clean_text(text.strip() or text).replace(zwsp, "")
    assert_prompts_fit(module_fake)


@pytest.mark.parametrize(
    "content",
    [
        case(f"<@{BOT_ID}>", id="bare-mention"),
        case(f"<@{BOT_ID}> <@{BOT_ID}> <@!{BOT_ID}>", id="only-bot-mentions"),
        case(f"<@{BOT_ID}> <@123> <@!456> <@&789>", id="mentions-of-others"),
        case(f"<@{BOT_ID}> @everyone @here ping them all", id="everyone"),
        case(f"<@{BOT_ID}> " + "`" * 10_000, id="backtick-bomb"),
        case(f"<@{BOT_ID}> " + "||spoiler|| " * 800, id="spoiler-flood"),
    ],
)
async def test_discord_mention_in_a_server(dc, module_fake, module_sessions, content):
    posted = await discord_post(dc, content, in_guild=True)
    assert_parts(posted.texts, DISCORD_LIMIT)
    assert_clear("\n".join(posted.texts))
    for call in posted.sent:
        assert call.body["allowed_mentions"]["parse"] == []  # the model pings nobody
    scope = await scope_of(module_sessions, DISCORD_TENANT, str(posted.author))
    assert scope is not None and len(await said(module_sessions, scope)) == 1


async def test_discord_message_over_the_size_limit_gets_the_refusal(dc, module_fake):
    big = "z" * (MAX_EVENT_CHARS + 1)
    posted = await discord_post(dc, big)
    assert module_fake.requests == []
    assert posted.texts and str(EventTooLarge(len(big), MAX_EVENT_CHARS)) in posted.texts[0], (
        posted.texts
    )


# =============================================================================================
# What the model writes back, split for each platform
# =============================================================================================

CODE = "\n".join(f"value_{i} = compute({i}, 'harbour')  # line {i}" for i in range(150))
INDENTED = "\n".join("   " + line for line in CODE.splitlines())
REPLIES = {
    "long-code-block": "Here:\n```python\n" + CODE + "\n```\nDone.",
    "unclosed-code-block": "Here:\n```python\n" + CODE,
    "tilde-fence": "~~~js\n" + CODE + "\n~~~",
    "long-code-line": "```\n" + "x" * 7000 + "\n```",
    "many-small-blocks": "\n".join(f"Step {i}:\n```sh\necho {i}\n```" for i in range(120)),
    "12k-prose": (PROSE * 200)[:12_000],  # the longest reply a turn may send
    "one-long-word": "y" * 9000,
    "indented-fence-in-a-list": "1. Run this:\n   ```python\n" + INDENTED + "\n   ```\n2. Done.",
    "four-backtick-fence": "````markdown\n```python\n" + CODE + "\n```\n````",
}
FENCE_BUGS: dict[str, Bug] = {}


def reply_cases() -> list[Any]:
    return [case(name, *bug_marks(FENCE_BUGS, name), id=name) for name in REPLIES]


@pytest.mark.parametrize("name", reply_cases())
async def test_model_reply_through_discord(dc, module_fake, name):
    reply = REPLIES[name]
    module_fake.brain = lambda body: summary_of(body) if is_summary_request(body) else say(reply)
    posted = await discord_post(dc, "show me")
    assert_parts(posted.texts, DISCORD_LIMIT, reply)


@pytest.mark.parametrize("name", reply_cases())
async def test_model_reply_through_slack(slack, module_fake, name):
    reply = REPLIES[name]
    module_fake.brain = lambda body: summary_of(body) if is_summary_request(body) else say(reply)
    status, posts = await slack_dispatch(slack, slack_message(slack_uid(), "show me", "D6"))
    assert status == 200
    assert_parts(slack_texts(posts), SLACK_LIMIT, to_slack_mrkdwn(reply))


SPLIT_PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 27, 1 << 27))
from adapters.text import split_message
parts = split_message(sys.stdin.read(), int(sys.argv[1]))
assert all(len(p) <= int(sys.argv[1]) for p in parts), [len(p) for p in parts]
print(len(parts))
"""


@pytest.mark.parametrize(
    "limit", [case(DISCORD_LIMIT, id="discord"), case(SLACK_LIMIT, id="slack")]
)
async def test_split_survives_a_fence_header_longer_than_the_limit(limit):
    reply = "```" + "p" * (limit + 10) + "\nprint('hi')\n```"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SPLIT_PROBE,
        str(limit),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(reply.encode()), 5)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("split_message did not finish in 5 s") from None
    assert proc.returncode == 0, err.decode()[-500:]
