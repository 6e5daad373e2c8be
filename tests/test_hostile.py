"""Hostile input at every entry point: a corpus of cases, each answered clearly.

Messages (the engine, Slack, Discord), uploads (the engine, Slack, Discord), commands (the
CLI, Slack's /companion, Discord's slash commands) and garbage from the model endpoint. For
every case: no exception escapes, the member or operator gets a clear answer, nothing the
member said is lost (or, when refused, nothing is stored), replies respect the platform's
limits, and time stays bounded.

Expensive set-up is shared per module: one schema, one fake model, one engine, one Slack
app and one Discord client; each case uses a member of its own. A case that fails because
the product is wrong stays here, marked `xfail(strict=True, reason="BUG: ...")`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import discord
import openai
import pytest
from aiohttp import web
from slack_bolt.request.async_request import AsyncBoltRequest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import async_sessionmaker

import adapters.slack.events as slack_events
import core.members.documents as documents
from adapters.common import FORGET_ASK, NOT_ADMIN, NOTHING_YET, SORRY, Services
from adapters.discord import build_discord_client
from adapters.discord.messages import DISCORD_LIMIT
from adapters.slack import build_slack_app
from adapters.slack.commands import RESET
from bot.database import make_engine, migrate
from core.config import EngineConfig
from core.errors import EventTooLarge, UploadRejected
from core.events import MAX_EVENT_CHARS, EventKind, InboundEvent, clean_text
from core.llm import OpenAIChat
from core.members.documents import MAX_UPLOAD_BYTES, chunk_text
from core.members.service import Members
from core.memory.tokens import TokenCounter
from core.memory.turn import STEP_CAP_REPLY, Mind
from core.models import Agent, AuditEntry, Block, Event, Message, Passage, Tenant, User
from core.runtime.engine import INTERNAL_ERROR_REPLY, Engine
from core.scope import Scope
from tests.conftest import COMPANION, ROOT, Clock, cli_env
from tests.fake_discord import (
    MANAGE_GUILD,
    FakeDiscord,
    attachment,
    button_click,
    command,
    guild,
    member,
    message,
    ready,
    role,
    snowflake,
    subcommand,
    text_channel,
    user,
)
from tests.fake_openai import (
    FakeOpenAI,
    calls,
    completion,
    count_prompt,
    default_brain,
    is_summary_request,
    last,
    raw_call,
    say,
    summary_of,
    tool_call,
)
from tests.fake_slack import BOT_USER, TEAM, FakeSlack, signed
from tests.hostile import files
from tests.hostile.corpus import INJECTIONS, MESSAGES, PROSE
from tests.pdfs import make_pdf

CONFIG = EngineConfig(rate_limit=None)
WINDOW = CONFIG.context_window
SECRET = "hostile-signing-secret"
SLACK_LIMIT = slack_events.SLACK_TEXT_LIMIT
SLACK_TENANT = f"slack:{TEAM}"
GUILD = 1_200_000_000_000_000_001
GENERAL = 1_200_000_000_000_000_002
BOT_ID = 1_200_000_000_000_000_010
APP_ID = 1_200_000_000_000_000_011
BOT_ROLE = 1_200_000_000_000_000_012
MOD = 1_200_000_000_000_000_022
OPERATOR = 1_200_000_000_000_000_023
DISCORD_TENANT = f"discord:{GUILD}"
BOT = user(BOT_ID, "Companion", bot=True)
STRING, USER, BOOLEAN = 3, 6, 5
HANDLER_TASKS = ("discord.py: ", "CommandTree-invoker", "discord-ui-view-dispatch")
_ids = itertools.count(1)


def xbug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"BUG: {reason}")


def case(value: Any, *marks: pytest.MarkDecorator, id: str) -> Any:
    return pytest.param(value, marks=marks, id=id)


def uid(prefix: str = "u") -> str:
    return f"{prefix}{os.getpid()}x{next(_ids)}"


def slack_uid() -> str:
    return f"U{os.getpid() % 1000:03d}X{next(_ids):05d}"


# --- module-wide set-up ----------------------------------------------------------------------


@pytest.fixture(scope="module")
async def hschema(pg_url: str):
    name = f"hostile{os.getpid()}"
    engine = make_engine(pg_url)
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        await conn.execute(text(f"CREATE SCHEMA {name}"))
    await engine.dispose()
    engine = make_engine(pg_url, schema=name)
    await migrate(engine, 16)
    await engine.dispose()
    yield name
    engine = make_engine(pg_url)
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
    await engine.dispose()


@pytest.fixture(scope="module")
async def db(pg_url: str, hschema: str):
    engine = make_engine(pg_url, schema=hschema)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@pytest.fixture(scope="module")
async def model():
    async with FakeOpenAI(embedding_dim=16) as server:
        yield server


@pytest.fixture(scope="module")
def hclock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
async def engines(db, model, hclock):
    """Build an engine on the module's schema (one per case where a case may skew it)."""
    clients: list[openai.AsyncOpenAI] = []

    def build(config: EngineConfig = CONFIG) -> Engine:
        client = openai.AsyncOpenAI(
            base_url=model.base_url, api_key="test", max_retries=0, timeout=20.0
        )
        clients.append(client)
        return Engine(db, Mind(OpenAIChat(client, "fake"), TokenCounter(), config), hclock)

    yield build
    for client in clients:
        await client.close()


@pytest.fixture(scope="module")
def eng(engines) -> Engine:
    return engines()


@pytest.fixture(scope="module")
def members(db, hclock) -> Members:
    return Members(db, CONFIG, hclock)


@pytest.fixture(autouse=True)
def fresh_model(model: FakeOpenAI) -> None:
    model.brain = default_brain
    model.requests.clear()
    model.failures.clear()
    model.delay = 0.0
    model.inflation = 1.0


# --- what every case checks ------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fences_balanced(part: str) -> bool:
    """Whether every fenced code block opened in `part` is closed in it (CommonMark rules;
    a bare run of more than 20 backticks or tildes is noise, not a fence)."""
    opened: str | None = None
    for line in part.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        run, info = match.group(1), match.group(2)
        if len(run) > 20 and not info.strip():
            continue
        if opened is None:
            if run[0] == "`" and "`" in info:
                continue  # inline code, not a fence
            opened = run
        elif run[0] == opened[0] and len(run) >= len(opened) and not info.strip():
            opened = None
    return opened is None


def squash(text: str) -> str:
    """The words of a text without fences and white space: what splitting must keep."""
    lines = [line for line in text.split("\n") if not _FENCE.match(line)]
    return "".join("".join(lines).split())


def assert_clear(reply: str) -> None:
    """A reply a person can read: words, not silence, not the engine's own failure."""
    assert isinstance(reply, str) and reply.strip(), f"empty reply {reply!r}"
    assert reply not in (INTERNAL_ERROR_REPLY, SORRY), reply
    assert re.search(r"[A-Za-z]{2,}", reply), f"no words in {reply[:200]!r}"


def assert_one_line(answer: str) -> None:
    assert answer.strip() and "\n" not in answer.strip(), f"want one line: {answer!r}"
    assert "Traceback" not in answer


def assert_parts(parts: list[str], limit: int, whole: str | None = None) -> None:
    assert parts, "nothing was sent"
    for part in parts:
        assert part.strip(), "an empty part was sent"
        assert len(part) <= limit, f"a part of {len(part)} characters (limit {limit})"
    if whole is not None and fences_balanced(whole):
        odd = [i for i, p in enumerate(parts) if not fences_balanced(p)]
        assert not odd, f"parts {odd} of {len(parts)} open a code block they do not close"
    if whole is not None:
        assert squash("\n".join(parts)) == squash(whole), "text was lost or changed in splitting"


def assert_prompts_fit(model: FakeOpenAI, window: int = WINDOW) -> None:
    for body in model.chat_requests:
        assert count_prompt(body) <= window, f"prompt of {count_prompt(body)} > window {window}"


async def rows(db, model_cls: Any, scope: Scope) -> list[Any]:
    async with db() as session:
        found = await session.scalars(
            select(model_cls)
            .where(model_cls.tenant_id == scope.tenant_id, model_cls.agent_id == scope.agent_id)
            .order_by(model_cls.id)
        )
        return list(found)


async def said(db, scope: Scope) -> list[str]:
    """The member's own messages in recall storage."""
    return [m.content for m in await rows(db, Message, scope) if m.role == "user"]


async def scope_of(db, tenant: str, user_id: str) -> Scope | None:
    async with db() as session:
        row = (
            await session.execute(
                select(Agent.tenant_id, Agent.id)
                .join(User, User.id == Agent.user_id)
                .join(Tenant, Tenant.id == User.tenant_id)
                .where(Tenant.key == tenant, User.external_id == user_id)
            )
        ).first()
    return Scope(row[0], row[1]) if row else None


async def audit_count(db) -> int:
    async with db() as session:
        return int(await session.scalar(select(func.count()).select_from(AuditEntry)) or 0)


async def user_count(db) -> int:
    async with db() as session:
        return int(await session.scalar(select(func.count()).select_from(User)) or 0)


# =============================================================================================
# 1. Messages through Engine.converse
# =============================================================================================


@pytest.mark.parametrize("text", list(MESSAGES.values()), ids=list(MESSAGES))
async def test_engine_message(eng, model, db, text):
    scope = await eng.agent("hostile", uid())
    started = time.perf_counter()
    exchange = await eng.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text, f"msg:{uid()}"))
    assert time.perf_counter() - started < 10
    assert exchange.replies, "no reply"
    for reply in exchange.replies:
        assert_clear(reply)
    assert await said(db, scope) == [clean_text(text)]  # kept in full, not cut
    (event,) = await rows(db, Event, scope)
    assert (event.status, event.error) == ("done", None)
    assert_prompts_fit(model)


async def test_engine_message_over_the_size_limit_is_refused_and_nothing_stored(eng, model, db):
    scope = await eng.agent("hostile", uid())
    with pytest.raises(EventTooLarge) as refused:
        await eng.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "x" * (MAX_EVENT_CHARS + 1)))
    words = str(refused.value)
    assert f"{MAX_EVENT_CHARS + 1:,}" in words and f"{MAX_EVENT_CHARS:,}" in words
    assert_one_line(words)
    assert await rows(db, Event, scope) == [] and await rows(db, Message, scope) == []
    assert model.requests == []


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
async def test_prompt_injection_sees_only_the_speakers_data(eng, model, db, text):
    bob = await eng.agent("club", uid("bob"))
    await eng.converse(bob, InboundEvent(EventKind.USER_MESSAGE, f"remember that {BOB_SAID}"))
    await eng.upload(bob, "bob.txt", f"Bob's file: {BOB_FILE}, kayak club.".encode())
    async with db() as session:
        bobs = await session.scalars(select(Block.value).where(Block.agent_id == bob.agent_id))
        assert any(BOB_SECRET in value for value in bobs)  # so there is something to leak
    alice = await eng.agent("club", uid("alice"))
    await eng.converse(alice, InboundEvent(EventKind.USER_MESSAGE, "my boat is a kayak too"))
    model.requests.clear()
    model.brain = snooping_brain

    exchange = await eng.converse(alice, InboundEvent(EventKind.USER_MESSAGE, text))

    assert len(model.chat_requests) == 2
    for body in model.chat_requests:
        prompt = json.dumps(body, ensure_ascii=False)
        for secret in (BOB_SECRET, BOB_FILE, BOB_SAID, "Bob's file"):
            assert secret not in prompt
        assert "my boat is a kayak too" in prompt  # her own history is there
    (reply,) = exchange.replies
    assert_clear(reply)
    assert BOB_SECRET not in reply and BOB_FILE not in reply
    assert text in await said(db, alice)


# =============================================================================================
# 2. Messages through the Slack adapter (Bolt dispatch, real payloads)
# =============================================================================================


@dataclass
class SlackRig:
    app: Any
    api: FakeSlack


_ts = itertools.count(100)


def slack_envelope(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "legacy",
        "team_id": TEAM,
        "api_app_id": "A1",
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{next(_ts)}",
        "event_time": 1700000000,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
    }


def slack_message(user_id: str, text: str, channel: str, **extra: Any) -> dict[str, Any]:
    ts = f"17{next(_ts):08d}.000100"
    event = {
        "type": "message",
        "channel": channel,
        "user": user_id,
        "text": text,
        "ts": ts,
        "channel_type": "im",
        "event_ts": ts,
        **extra,
    }
    return slack_envelope(event)


@pytest.fixture(scope="module")
async def slack(eng, members):
    async with FakeSlack() as api:
        api.add_user("UADMIN", admin=True)
        services = Services(eng, members, frozenset({"UOPS"}))
        app = build_slack_app(
            services, "xoxb-test", SECRET, api.base_url, process_before_response=True
        )
        yield SlackRig(app, api)


async def slack_dispatch(rig: SlackRig, payload: dict[str, Any]) -> tuple[int, list[dict]]:
    """(HTTP status, the chat.postMessage calls it made)."""
    before = len(rig.api.calls)
    body = json.dumps(payload)
    response = await rig.app.async_dispatch(
        AsyncBoltRequest(body=body, headers=signed(body, SECRET))
    )
    posts = [args for name, args in rig.api.calls[before:] if name == "chat.postMessage"]
    return response.status, posts


def slack_texts(posts: list[dict[str, Any]]) -> list[str]:
    for post in posts:
        blocks = post.get("blocks")
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks or []
        for block in blocks:
            assert len(block["text"]["text"]) <= SLACK_LIMIT
    return [post["text"] for post in posts]


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
async def test_slack_message(slack, model, db, text):
    member_id, channel = slack_uid(), f"D{next(_ids)}"
    status, posts = await slack_dispatch(slack, slack_message(member_id, text, channel))
    assert status == 200
    replies = slack_texts(posts)
    assert_parts(replies, SLACK_LIMIT)
    assert all(p["channel"] == channel for p in posts)
    assert_clear("\n".join(replies))
    scope = await scope_of(db, SLACK_TENANT, member_id)
    assert scope is not None
    assert await said(db, scope) == [clean_text(text.strip())]
    assert_prompts_fit(model)


@pytest.mark.parametrize("text", ["", "   ", " \t\n\u00a0\u3000 "], ids=["empty", "spaces", "ws"])
async def test_slack_message_without_words_is_ignored_quietly(slack, model, db, text):
    """Slack never delivers a text-less message without files; nothing to answer or lose."""
    member_id = slack_uid()
    status, posts = await slack_dispatch(slack, slack_message(member_id, text, "D9"))
    assert status == 200 and posts == [] and model.requests == []
    scope = await scope_of(db, SLACK_TENANT, member_id)
    assert scope is None or await rows(db, Event, scope) == []


async def test_slack_bare_mention_is_answered(slack, model):
    ts = f"17{next(_ts):08d}.000200"
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


async def test_slack_message_over_the_size_limit_gets_the_refusal(slack, model, db):
    member_id = slack_uid()
    big = "y" * (MAX_EVENT_CHARS + 1)
    status, posts = await slack_dispatch(slack, slack_message(member_id, big, "D8"))
    assert model.requests == []
    texts = slack_texts(posts)
    assert any(str(EventTooLarge(len(big), MAX_EVENT_CHARS)) in t for t in texts), texts


async def test_slack_reply_cannot_broadcast(slack, model):
    model.brain = lambda body: say("Hey <!channel> and <!here> and <@U2>, look at this!")
    status, posts = await slack_dispatch(slack, slack_message(slack_uid(), "say hi to all", "D7"))
    (reply,) = slack_texts(posts)
    assert not re.search(r"<!(channel|here|everyone)\b|<@U2>", reply), reply


# =============================================================================================
# 3. Messages through the Discord adapter (gateway payloads, fake REST API)
# =============================================================================================


@dataclass
class DiscordRig:
    client: Any
    api: FakeDiscord

    @property
    def state(self) -> Any:
        return self.client._connection

    def answers(self, interaction: dict[str, Any]) -> list[str]:
        bodies = [c.body.get("data") or {} for c in self.api.callbacks(interaction)]
        bodies += [c.body for c in self.api.followups(interaction) + self.api.edits(interaction)]
        return [body.get("content") or "" for body in bodies]


async def settle(within: float = 30.0) -> None:
    """Wait until every Discord event handler, command and button callback has finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        pending = [
            t
            for t in asyncio.all_tasks()
            if t.get_name().startswith(HANDLER_TASKS) and not t.done()
        ]
        if not pending:
            return
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"handlers still running: {pending}")
        await asyncio.wait(pending, timeout=left)


@pytest.fixture(scope="module")
async def dc(eng, members):
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    async with FakeDiscord(BOT, APP_ID) as api:
        services = Services(eng, members, admin_ids=frozenset({str(OPERATOR)}))
        client = build_discord_client(
            services, api_url=api.api_url, gateway_url="ws://127.0.0.1:9/gateway"
        )
        client._connection.guild_ready_timeout = 0.05
        await client.login("fake-token")
        state = client._connection
        state.parse_ready(ready(BOT, APP_ID, [GUILD]))
        people = [member(BOT_ID, "Companion", roles=[BOT_ROLE]), member(MOD, "Mo")]
        people[0]["user"]["bot"] = True
        state.parse_guild_create(
            guild(
                GUILD,
                MOD,
                [text_channel(GENERAL, GUILD, "general")],
                [],
                people,
                [role(BOT_ROLE, "Companion", bot_id=BOT_ID)],
            )
        )
        await api.wait_for(lambda: api.find("PUT", f"/applications/{APP_ID}/commands"))
        await settle()
        yield DiscordRig(client, api)
        await settle()
        await client.close()
    discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = base, gateway


@dataclass
class Posted:
    author: int
    channel: int
    payload: dict[str, Any]
    sent: list[Any] = field(default_factory=list)  # the POST .../messages calls made

    @property
    def texts(self) -> list[str]:
        return [c.body["content"] for c in self.sent]


async def discord_post(
    rig: DiscordRig,
    content: str,
    *,
    in_guild: bool = False,
    attachments: list[dict[str, Any]] | None = None,
    mentions: list[dict[str, Any]] | None = None,
) -> Posted:
    author = snowflake()
    who = user(author, f"Member{author % 1000}")
    if in_guild:
        channel = GENERAL
        payload = message(
            who,
            channel,
            content,
            guild_id=GUILD,
            author_member=member(author, f"Member{author % 1000}"),
            mentions=[BOT] if mentions is None else mentions,
            attachments=attachments,
        )
    else:
        channel = snowflake()
        payload = message(who, channel, content, attachments=attachments)
    before = len(rig.api.calls)
    rig.state.parse_message_create(payload)
    await settle()
    sent = [
        c
        for c in rig.api.calls[before:]
        if c.method == "POST" and c.path == f"/channels/{channel}/messages"
    ]
    return Posted(author, channel, payload, sent)


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
async def test_discord_dm(dc, model, db, text):
    posted = await discord_post(dc, text)
    assert_parts(posted.texts, DISCORD_LIMIT)
    assert_clear("\n".join(posted.texts))
    scope = await scope_of(db, DISCORD_TENANT, str(posted.author))
    assert scope is not None
    (stored,) = await said(db, scope)
    zwsp = "\u200b"  # clean_content defuses @everyone with one; that is not a loss
    assert stored.replace(zwsp, "") == clean_text(text.strip() or text).replace(zwsp, "")
    assert_prompts_fit(model)


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
async def test_discord_mention_in_a_server(dc, model, db, content):
    posted = await discord_post(dc, content, in_guild=True)
    assert_parts(posted.texts, DISCORD_LIMIT)
    assert_clear("\n".join(posted.texts))
    for call in posted.sent:
        assert call.body["allowed_mentions"]["parse"] == []  # the model pings nobody
    scope = await scope_of(db, DISCORD_TENANT, str(posted.author))
    assert scope is not None and len(await said(db, scope)) == 1


async def test_discord_message_over_the_size_limit_gets_the_refusal(dc, model):
    big = "z" * (MAX_EVENT_CHARS + 1)
    posted = await discord_post(dc, big)
    assert model.requests == []
    assert posted.texts and str(EventTooLarge(len(big), MAX_EVENT_CHARS)) in posted.texts[0], (
        posted.texts
    )


# =============================================================================================
# 4. What the model writes back, split for each platform
# =============================================================================================

CODE = "\n".join(f"value_{i} = compute({i}, 'harbour')  # line {i}" for i in range(150))
INDENTED = "\n".join("   " + line for line in CODE.splitlines())
REPLIES = {
    "long-code-block": "Here:\n```python\n" + CODE + "\n```\nDone.",
    "unclosed-code-block": "Here:\n```python\n" + CODE,
    "tilde-fence": "~~~js\n" + CODE + "\n~~~",
    "long-code-line": "```\n" + "x" * 7000 + "\n```",
    "many-small-blocks": "\n".join(f"Step {i}:\n```sh\necho {i}\n```" for i in range(120)),
    "100k-prose": PROSE * 1200,
    "one-long-word": "y" * 9000,
    "indented-fence-in-a-list": "1. Run this:\n   ```python\n" + INDENTED + "\n   ```\n2. Done.",
    "four-backtick-fence": "````markdown\n```python\n" + CODE + "\n```\n````",
}
FENCE_BUGS = {}


def reply_cases() -> list[Any]:
    return [
        case(name, *([xbug(FENCE_BUGS[name])] if name in FENCE_BUGS else []), id=name)
        for name in REPLIES
    ]


@pytest.mark.parametrize("name", reply_cases())
async def test_model_reply_through_discord(dc, model, name):
    reply = REPLIES[name]
    model.brain = lambda body: summary_of(body) if is_summary_request(body) else say(reply)
    posted = await discord_post(dc, "show me")
    assert_parts(posted.texts, DISCORD_LIMIT, reply)


@pytest.mark.parametrize("name", reply_cases())
async def test_model_reply_through_slack(slack, model, name):
    reply = REPLIES[name]
    model.brain = lambda body: summary_of(body) if is_summary_request(body) else say(reply)
    status, posts = await slack_dispatch(slack, slack_message(slack_uid(), "show me", "D6"))
    assert status == 200
    assert_parts(slack_texts(posts), SLACK_LIMIT, slack_events.to_slack_mrkdwn(reply))


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


# =============================================================================================
# 5. Uploads through Engine.upload
# =============================================================================================


@dataclass(frozen=True)
class Upload:
    name: str
    data: Callable[[], bytes]
    outcome: str  # "refused", "stored" or "either"
    says: str = ""  # part of the refusal, or of the stored text
    stored_as: str | None = None  # the source name the passages must carry


def blob(value: bytes) -> Callable[[], bytes]:
    return lambda: value


_cached: dict[str, bytes] = {}


def cached(key: str, build: Callable[[], bytes]) -> Callable[[], bytes]:
    def get() -> bytes:
        if key not in _cached:
            _cached[key] = build()
        return _cached[key]

    return get


TEXT = b"Harbour notes\nThe red buoy marks the reef.\n"
UTF16_ODD = "\ufeffhello".encode("utf-16-le") + b"x"
DEEP_LIST = b"[" * 10_000 + b"]" * 10_000
DEEP_DICT = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
CRASH = {
    "nul-name": (
        "a NUL in the file name reaches Postgres in passages.source (core/documents.py "
        "store_document; only the text goes through clean_text): the upload dies with a "
        "database error instead of a refusal or a cleaned name"
    ),
    "surrogate-name": (
        "a lone surrogate in the file name (a name decoded with surrogateescape) reaches "
        "passages.source uncleaned (core/documents.py store_document): UnicodeEncodeError"
    ),
    "utf16-odd": (
        "UTF-16 with a BOM but an odd number of bytes (or a lone surrogate) raises "
        "UnicodeDecodeError out of core/documents.py _decode (only the UTF-8 branch is "
        "guarded) instead of UploadRejected"
    ),
    "csv-huge-field": (
        "a CSV field over 131072 characters raises _csv.Error out of core/documents.py "
        "_csv_text (csv.field_size_limit) instead of UploadRejected"
    ),
    "json-deep": (
        "deeply nested JSON raises RecursionError out of core/documents.py extract_text "
        "(json.loads, and _json_lines recurses per level: even ~400 levels crash) instead "
        "of UploadRejected"
    ),
    "json-bigint": (
        "a JSON number over 4300 digits raises ValueError (int max str digits) out of "
        "core/documents.py extract_text, which catches only JSONDecodeError"
    ),
    "pdf-deflate-bomb": (
        "a content stream inflating past pypdf's 75 MB limit raises "
        "pypdf.errors.LimitReachedError, which core/documents.py _pdf_text does not catch "
        "(it is a PyPdfError, not a PdfReadError)"
    ),
    "windows-path": (
        "minor: PurePath(name).name on a POSIX server keeps a Windows path "
        "('..\\\\..\\\\windows\\\\notes.txt') whole, so the passages' source and the agent's "
        "event show the directory part (core/engine.py _upload, core/documents.py)"
    ),
}

UPLOADS: dict[str, Upload] = {
    # wrong types and names
    "exe": Upload("virus.exe", blob(files.EXE), "refused", "I take"),
    "zip": Upload("archive.zip", files.small_zip, "refused", "I take"),
    "png": Upload("photo.png", blob(files.PNG), "refused", "I take"),
    "no-extension": Upload("README", blob(TEXT), "refused", "I take"),
    "double-extension": Upload("notes.txt.exe", blob(TEXT), "refused", "I take"),
    "dotfile": Upload(".txt", blob(TEXT), "refused", "I take"),
    "trailing-space": Upload("notes.txt ", blob(TEXT), "refused", "I take"),
    "rtl-override-name": Upload("\u202etxt.exe", blob(TEXT), "refused", "I take"),
    "upper-case-suffix": Upload("NOTES.TXT", blob(TEXT), "stored", "red buoy", "NOTES.TXT"),
    "traversal-to-passwd": Upload("../../etc/passwd", blob(b"root:x:0:0"), "refused", "I take"),
    "traversal-txt": Upload(
        "../../../etc/notes.txt", blob(TEXT), "stored", "red buoy", "notes.txt"
    ),
    "absolute-path": Upload("/etc/notes.md", blob(TEXT), "stored", "red buoy", "notes.md"),
    "windows-path": Upload("..\\..\\windows\\notes.txt", blob(TEXT), "stored", "buoy", "notes.txt"),
    "nul-name": Upload("evil.exe\x00.txt", blob(TEXT), "either", "red buoy"),
    "newline-name": Upload("line1\nline2.txt", blob(TEXT), "stored", "red buoy"),
    "surrogate-name": Upload("caf\udce9.txt", blob(TEXT), "either", "red buoy"),
    "long-name": Upload("n" * 5000 + ".md", blob(TEXT), "stored", "red buoy"),
    # sizes and bombs
    "too-large": Upload("big.txt", lambda: b"a" * (MAX_UPLOAD_BYTES + 1), "refused", "MB"),
    "zip-bomb-as-txt": Upload("bomb.txt", cached("zip", files.zip_bomb), "refused", "UTF-8"),
    "zip-bomb-as-pdf": Upload("bomb.pdf", cached("zip", files.zip_bomb), "refused", "not a PDF"),
    "gzip-bomb-as-json": Upload("bomb.json", cached("gz", files.gzip_bomb), "refused", "UTF-8"),
    "pdf-deflate-bomb": Upload(
        "bomb.pdf", cached("pdfbomb", lambda: files.deflate_bomb_pdf(80)), "refused"
    ),
    "pdf-claims-100k-pages": Upload("lies.pdf", files.lying_page_count_pdf, "stored", "herons"),
    "pdf-501-pages": Upload(
        "long.pdf", cached("501", lambda: files.many_pages_pdf(501)), "refused", "pages"
    ),
    "pdf-page-loop": Upload("loop.pdf", files.page_loop_pdf, "refused", "PDF"),
    "pdf-truncated-half": Upload("cut.pdf", lambda: make_pdf("hello")[:300], "refused", "PDF"),
    "pdf-header-only": Upload("head.pdf", blob(b"%PDF-1.7\n"), "refused", "PDF"),
    "pdf-garbage-body": Upload(
        "junk.pdf", blob(b"%PDF-1.4\n" + bytes(range(256)) * 50), "refused", "PDF"
    ),
    "pdf-encrypted": Upload("locked.pdf", files.encrypted_pdf, "refused", "encrypted"),
    "pdf-without-text": Upload("drawing.pdf", files.no_text_pdf, "refused", "no text"),
    # encodings
    "binary-as-md": Upload("notes.md", blob(bytes(range(256)) * 20), "refused", "UTF-8"),
    "controls-as-txt": Upload("ctl.txt", blob(b"\x01\x02\x03\x04" * 1000), "refused", "binary"),
    "nul-in-text": Upload("nul.txt", blob(b"abc\x00def\n" * 200), "refused", "binary"),
    "latin1": Upload("cafe.txt", blob("café crème brûlée".encode("latin-1")), "refused", "UTF-8"),
    "utf16le-no-bom": Upload(
        "u16.txt", blob("hello harbour".encode("utf-16-le")), "either", "hello harbour"
    ),
    "utf16be-no-bom": Upload(
        "u16.txt", blob("hello harbour".encode("utf-16-be")), "either", "hello harbour"
    ),
    "utf16-odd": Upload("odd.txt", blob(UTF16_ODD), "either"),
    "utf16-lone-surrogate": Upload("sur.txt", blob(b"\xff\xfe\x00\xd8a\x00"), "either"),
    "utf8-bom-only": Upload("bom.txt", blob(b"\xef\xbb\xbf"), "refused", "no text"),
    # CSV
    "csv-ragged": Upload(
        "r.csv", blob(b"name,kind\nMiso\nRex,dog,extra,more\n,,\n"), "stored", "Rex"
    ),
    "csv-huge-field": Upload("h.csv", blob(b"a,b\n" + b"x" * 200_000 + b",1\n"), "either"),
    "csv-unterminated-quote": Upload(
        "q.csv", blob(b'a,b\n"open quote,1\nnext'), "stored", "open quote"
    ),
    "csv-header-only": Upload("h.csv", blob(b"alpha,beta\n"), "stored", "alpha"),
    "csv-blank-lines": Upload("b.csv", blob(b"\n\n\n"), "refused", "no text"),
    # JSON
    "json-deep-list": Upload("deep.json", blob(DEEP_LIST), "refused"),
    "json-deep-dict": Upload("deep.json", blob(DEEP_DICT), "refused"),
    "json-bigint": Upload("n.json", blob(b"1" * 5000), "either"),
    "json-nul-escape": Upload(
        "e.json", blob(b'{"note": "a\\u0000b harbour"}'), "stored", "harbour"
    ),
    "json-surrogate-escape": Upload(
        "s.json", blob(b'{"note": "\\ud800 harbour"}'), "stored", "harbour"
    ),
    "json-huge-array": Upload(
        "arr.json", lambda: b"[" + b"1," * 700_000 + b"1]", "refused", "more text"
    ),
    "json-broken": Upload("b.json", blob(b'{"a": [1, 2'), "refused", "not valid JSON"),
    # empty
    "empty-txt": Upload("e.txt", blob(b""), "refused", "no text"),
    "empty-pdf": Upload("e.pdf", blob(b""), "refused", "not a PDF"),
    "empty-json": Upload("e.json", blob(b""), "refused", "not valid JSON"),
    "empty-csv": Upload("e.csv", blob(b""), "refused", "no text"),
    "only-newlines": Upload("n.md", blob(b"\n" * 100_000), "refused", "no text"),
    "over-extracted-limit": Upload(
        "x.txt", lambda: b"abcdefghi\n" * 200_001, "refused", "more text"
    ),
}
UPLOAD_BUGS = {}


def upload_cases(names: list[str] | None = None) -> list[Any]:
    return [
        case(name, *([xbug(UPLOAD_BUGS[name])] if name in UPLOAD_BUGS else []), id=name)
        for name in names or list(UPLOADS)
    ]


async def check_refused_or_stored(db, scope: Scope, spec: Upload, error: UploadRejected | None):
    passages = await rows(db, Passage, scope)
    if error is not None:
        assert spec.outcome in ("refused", "either"), f"refused: {error}"
        assert_one_line(str(error))
        if spec.outcome == "refused":
            assert spec.says in str(error), str(error)
        assert passages == [] and await rows(db, Event, scope) == [], "stored on refusal"
        return
    assert spec.outcome in ("stored", "either"), "stored what should be refused"
    assert passages, "nothing stored"
    stored = "\n".join(p.text for p in passages)
    assert spec.says in stored
    for passage in passages:
        assert "\x00" not in passage.source
        if spec.stored_as is not None:
            assert passage.source.startswith(f"{spec.stored_as} (part 1 of ")


@pytest.mark.parametrize("name", upload_cases())
async def test_engine_upload(eng, model, db, name):
    spec = UPLOADS[name]
    data = spec.data()
    scope = await eng.agent("uploads", uid())
    error: UploadRejected | None = None
    started = time.perf_counter()
    try:
        exchange = await eng.upload(scope, spec.name, data, dedup_key=f"up:{uid()}")
    except UploadRejected as refused:
        error = refused
    assert time.perf_counter() - started < 3.0, "took too long"
    await check_refused_or_stored(db, scope, spec, error)
    if error is None:
        assert exchange.replies and all(r.strip() for r in exchange.replies)
        action = model.chat_requests[0]["messages"][-1]["content"]
        assert "/" not in action.split("shared the file", 1)[1].split(" (", 1)[0]
        assert_prompts_fit(model)
    else:
        assert model.requests == []


@xbug(
    "a 15 KB PDF whose one content stream inflates to 12 MB of text is refused only after "
    "pypdf has parsed all of it, in the event loop (core/documents.py _pdf_text checks "
    "MAX_EXTRACTED_CHARS after each whole page; Engine.upload runs extract_text "
    "synchronously): ~6x the time of a legitimate document at the text limit here, ~17 s "
    "at pypdf's 75 MB inflate cap, during which no member of any community is answered"
)
async def test_a_pdf_text_bomb_is_refused_in_about_the_time_of_a_legit_document(eng, db):
    legit = files.text_bomb_pdf(1.9)  # just under MAX_EXTRACTED_CHARS: its text is taken
    bomb = files.text_bomb_pdf(12)
    started = time.perf_counter()
    assert len(documents.extract_text("legit.pdf", legit)) == 1_900_000
    baseline = time.perf_counter() - started
    scope = await eng.agent("uploads", uid())
    started = time.perf_counter()
    with pytest.raises(UploadRejected, match="more text than I can keep"):
        await eng.upload(scope, "bomb.pdf", bomb)
    took = time.perf_counter() - started
    assert await rows(db, Passage, scope) == []
    assert took < 2 * baseline + 0.2, f"{took:.1f} s for the bomb, {baseline:.1f} s for a legit one"


@xbug(
    "core/documents.py chunk_text re-tokenizes the whole rest of a long line for every "
    "chunk it cuts (count(line) and truncate_to_tokens on the remainder): quadratic, so a "
    "2 MB one-line .txt takes minutes in the event loop (300 k chars: 1.6 s, 600 k: 6 s)"
)
async def test_a_single_line_upload_is_chunked_in_linear_time(monkeypatch):
    encoded = 0
    real_count, real_truncate = TokenCounter.count, documents.truncate_to_tokens

    def count(text: str) -> int:
        nonlocal encoded
        encoded += len(text)
        return real_count(text)

    def truncate(text: str, limit: int) -> str:
        nonlocal encoded
        encoded += len(text)
        return real_truncate(text, limit)

    monkeypatch.setattr(TokenCounter, "count", staticmethod(count))
    monkeypatch.setattr(documents, "truncate_to_tokens", truncate)
    line = "harbour " * 15_000  # 120 k characters, no line break
    chunks = chunk_text(line)
    assert "".join("".join(chunks).split()) == "".join(line.split())
    assert encoded <= 10 * len(line), f"tokenized {encoded / len(line):.0f}x the text"


# --- uploads through Slack -------------------------------------------------------------------

SLACK_UPLOADS = [
    "exe",
    "no-extension",
    "nul-name",
    "too-large",
    "zip-bomb-as-txt",
    "pdf-encrypted",
    "traversal-txt",
    "json-deep-list",
    "utf16-odd",
    "empty-txt",
    "pdf-deflate-bomb",
]


def slack_file(rig: SlackRig, spec: Upload, data: bytes, size: int | None = None) -> dict:
    key = f"f{next(_ids)}"
    rig.api.files[key] = data
    return {
        "id": f"F{next(_ids)}",
        "name": spec.name,
        "size": len(data) if size is None else size,
        "url_private_download": f"{rig.api.root}/files/{key}",
    }


def adapter_upload_marks(name: str) -> list[pytest.MarkDecorator]:
    if name not in UPLOAD_BUGS or name == "windows-path":
        return []
    return [xbug(UPLOAD_BUGS[name] + "; the adapter then has no clear answer for the member")]


@pytest.mark.parametrize("name", [case(n, *adapter_upload_marks(n), id=n) for n in SLACK_UPLOADS])
async def test_slack_upload(slack, model, db, name):
    spec = UPLOADS[name]
    data = spec.data()
    member_id, channel = slack_uid(), f"D{next(_ids)}"
    shared = slack_file(slack, spec, data)
    before = len(slack.api.calls)
    status, posts = await slack_dispatch(
        slack, slack_message(member_id, "", channel, subtype="file_share", files=[shared])
    )
    texts = slack_texts(posts)
    assert texts, "the member got no answer"
    for reply in texts:
        assert_clear(reply)
    downloads = [n for n, _ in slack.api.calls[before:] if n == "download"]
    scope = await scope_of(db, SLACK_TENANT, member_id)
    passages = await rows(db, Passage, scope) if scope else []
    if spec.outcome == "refused":
        assert passages == [] and spec.says in texts[0], texts
        if spec.says == "I take" or name == "too-large":
            assert downloads == [], "a refused file was downloaded"
    elif spec.outcome == "either" and not passages:
        pass  # refused, with the clear answer checked above
    else:
        assert passages and spec.says in "\n".join(p.text for p in passages)


async def test_slack_words_beside_a_bad_file_are_not_lost(slack, model, db):
    member_id = slack_uid()
    shared = slack_file(slack, UPLOADS["json-deep-list"], DEEP_LIST)
    payload = slack_message(
        member_id, "here are my notes", "D4", subtype="file_share", files=[shared]
    )
    status, posts = await slack_dispatch(slack, payload)
    scope = await scope_of(db, SLACK_TENANT, member_id)
    assert scope is not None and await said(db, scope) == ["here are my notes"]
    assert slack_texts(posts)


async def test_slack_upload_that_cannot_be_downloaded_is_explained(slack, model, db):
    member_id = slack_uid()
    shared = {"id": "Fgone", "name": "gone.txt", "size": 10, "url_private_download": ""}
    missing = {
        "id": "Fmissing",
        "name": "missing.md",
        "size": 10,
        "url_private_download": f"{slack.api.root}/files/not-there",
    }
    status, posts = await slack_dispatch(
        slack,
        slack_message(member_id, "", "D5", subtype="file_share", files=[shared, missing]),
    )
    texts = slack_texts(posts)
    assert len(texts) == 2
    assert "gone.txt" in texts[0] and "downloadable" in texts[0]
    assert "missing.md" in texts[1] and "download" in texts[1]
    scope = await scope_of(db, SLACK_TENANT, member_id)
    assert scope is None or await rows(db, Passage, scope) == []


# --- uploads through Discord -----------------------------------------------------------------

DISCORD_UPLOADS = [
    "exe",
    "double-extension",
    "nul-name",
    "too-large",
    "zip-bomb-as-pdf",
    "pdf-truncated-half",
    "binary-as-md",
    "csv-ragged",
    "json-deep-dict",
    "csv-huge-field",
    "empty-json",
]


@pytest.mark.parametrize("name", [case(n, *adapter_upload_marks(n), id=n) for n in DISCORD_UPLOADS])
async def test_discord_upload(dc, model, db, name):
    spec = UPLOADS[name]
    data = spec.data()
    key = f"att{next(_ids)}"
    dc.api.files[key] = data
    shared = attachment(dc.api.file_url(key), spec.name, len(data))
    before = len(dc.api.calls)
    posted = await discord_post(dc, "", attachments=[shared])
    assert posted.texts, "the member got no answer"
    for reply in posted.texts:
        assert_clear(reply)
        assert len(reply) <= DISCORD_LIMIT
    downloads = [c for c in dc.api.calls[before:] if c.path.startswith("/attachments/")]
    scope = await scope_of(db, DISCORD_TENANT, str(posted.author))
    passages = await rows(db, Passage, scope) if scope else []
    if spec.outcome == "refused":
        assert passages == [] and spec.says in posted.texts[0], posted.texts
        if spec.says == "I take" or name == "too-large":
            assert downloads == [], "a refused file was downloaded"
    elif spec.outcome == "either" and not passages:
        pass  # refused, with the clear answer checked above
    else:
        assert passages and spec.says in "\n".join(p.text for p in passages)


async def test_discord_words_beside_a_bad_file_are_not_lost(dc, model, db):
    key = f"att{next(_ids)}"
    dc.api.files[key] = DEEP_LIST
    shared = attachment(dc.api.file_url(key), "deep.json", len(DEEP_LIST))
    posted = await discord_post(dc, "here are my notes", attachments=[shared])
    scope = await scope_of(db, DISCORD_TENANT, str(posted.author))
    assert scope is not None and await said(db, scope) == ["here are my notes"]
    assert SORRY not in posted.texts


async def test_discord_upload_that_vanished_is_explained(dc, model, db):
    shared = attachment(dc.api.file_url("never-uploaded"), "notes.txt", 40)
    posted = await discord_post(dc, "", attachments=[shared])
    (reply,) = posted.texts
    assert "couldn't download notes.txt" in reply
    scope = await scope_of(db, DISCORD_TENANT, str(posted.author))
    assert scope is None or await rows(db, Passage, scope) == []


# =============================================================================================
# 6. Commands: the CLI
# =============================================================================================


@dataclass
class CliRun:
    code: int
    out: str
    err: str


def operator_env(model: FakeOpenAI, pg_url: str, hschema: str) -> dict[str, str]:
    env = cli_env(model, pg_url, hschema)
    return {k: v for k, v in env.items() if k.startswith(("COMPANION_", "OPENAI_", "DATABASE"))}


async def run_main(monkeypatch, capsys, argv: list[str], env: dict[str, str]) -> CliRun:
    """`companion ARGV` in this process, in a thread of its own (main runs asyncio.run).

    An exception out of `main` is what a person would see as a traceback."""
    import bot.cli

    for name in [n for n in os.environ if n.startswith(("COMPANION_", "OPENAI_", "DATABASE"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(bot.cli, "configure_logging", lambda *a, **k: None, raising=False)
    capsys.readouterr()
    crash = ""
    try:
        code = await asyncio.to_thread(bot.cli.main, argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except Exception as error:  # noqa: BLE001  (a traceback, for the person at the terminal)
        code, crash = 1, f"Traceback (most recent call last):\n{type(error).__name__}: {error}"
    out, err = capsys.readouterr()
    return CliRun(code, out, err + crash)


PARSE_ERRORS = {
    "no-arguments": [],
    "unknown-subcommand": ["frobnicate"],
    "unknown-option": ["chat", "--evil"],
    "export-without-user": ["export", "--tenant", "club"],
    "import-without-file": ["import"],
    "reset-without-tenant": ["reset", "--user", "bob"],
    "reembed-dim-not-a-number": ["reembed", "--dim", "lots"],
    "openers-without-action": ["openers"],
    "openers-unknown-action": ["openers", "delete-all"],
}


@pytest.mark.parametrize("argv", list(PARSE_ERRORS.values()), ids=list(PARSE_ERRORS))
async def test_cli_wrong_arguments(monkeypatch, capsys, argv):
    run = await run_main(monkeypatch, capsys, argv, {})
    assert run.code == 2 and run.out == ""
    assert "Traceback" not in run.err
    assert run.err.strip().splitlines()[-1].startswith("companion") and "error:" in run.err


@dataclass(frozen=True)
class CliCase:
    args: tuple[str, ...]
    says: str
    file: bytes | None = None  # written to a temporary file passed as {file}


def export_doc(**changes: Any) -> bytes:
    doc: dict[str, Any] = {
        "format": "companion-export",
        "version": 1,
        "tenant": "cli",
        "user": "imported",
        "blocks": [{"label": "human", "value": "likes tea", "limit": 2000}],
        "messages": [],
        "passages": [],
        **changes,
    }
    return json.dumps(doc).encode()


NOW_MUST = "--now must be an ISO-8601 time"
CLI_CASES = {
    "tick-now-word": CliCase(("tick", "--now", "yesterday"), NOW_MUST),
    "tick-now-impossible-date": CliCase(("tick", "--now", "2026-13-45T99:99"), NOW_MUST),
    "tick-now-injection": CliCase(
        ("tick", "--now", "2026-01-01'; DROP TABLE agents; --"), NOW_MUST
    ),
    "openers-now-garbage": CliCase(("openers", "list", "--now", "../../etc/passwd"), NOW_MUST),
    "export-hostile-names": CliCase(
        ("export", "--tenant", "../../etc", "--user", "'; DROP TABLE users; --"), "no agent"
    ),
    "reset-unknown-member": CliCase(("reset", "--tenant", "cli", "--user", "nobody"), ""),
    "import-missing-file": CliCase(("import", "/nonexistent/dir/export.json"), "cannot read"),
    "import-directory": CliCase(("import", "/"), "cannot read"),
    "import-binary": CliCase(("import", "{file}"), "not valid JSON", bytes(range(256)) * 40),
    "import-a-list": CliCase(("import", "{file}"), "not a Companion export", b"[1, 2, 3]"),
    "import-wrong-version": CliCase(
        ("import", "{file}"), "version", export_doc(version="../../etc")
    ),
    "import-no-user": CliCase(("import", "{file}"), "--user", export_doc(user=None)),
    "import-deep-json": CliCase(("import", "{file}"), "JSON", DEEP_LIST),
    "import-bad-limit": CliCase(
        ("import", "{file}"),
        "limit",
        export_doc(blocks=[{"label": "human", "value": "x", "limit": "lots"}]),
    ),
    "import-bad-message": CliCase(
        ("import", "{file}"),
        "messages[0]",
        export_doc(
            messages=[{"role": "user", "content": 42, "created_at": "2026-01-01T00:00:00+00:00"}]
        ),
    ),
    "import-bad-date": CliCase(
        ("import", "{file}"),
        "created_at",
        export_doc(messages=[{"role": "user", "content": "hi", "created_at": "tomorrow"}]),
    ),
    "export-to-missing-dir": CliCase(
        ("export", "--tenant", "cli", "--user", "existing", "--output", "/nonexistent/x.json"),
        "/nonexistent/x.json",
    ),
}
CLI_BUGS = {}


def cli_args(name: str, folder: Any) -> list[str]:
    spec = CLI_CASES[name]
    if spec.file is None:
        return list(spec.args)
    path = folder / f"{name}.json"
    path.write_bytes(spec.file)
    return [str(path) if a == "{file}" else a for a in spec.args]


def assert_operator_error(run: CliRun, says: str) -> None:
    assert "Traceback" not in run.err, run.err[-800:]
    assert run.out == ""
    assert_one_line(run.err)
    assert says in run.err, run.err


@pytest.mark.parametrize(
    "name",
    [case(n, *([xbug(CLI_BUGS[n])] if n in CLI_BUGS else []), id=n) for n in CLI_CASES],
)
async def test_cli_operator_errors(
    monkeypatch, capsys, tmp_path, model, pg_url, hschema, eng, name
):
    await eng.agent("cli", "existing")
    users = await user_count(eng.sessions)
    run = await run_main(
        monkeypatch, capsys, cli_args(name, tmp_path), operator_env(model, pg_url, hschema)
    )
    if name == "reset-unknown-member":  # not an error: nothing to do, and it says so
        assert run.code == 0 and "nothing to reset" in run.err
    else:
        assert run.code == 2, run
    assert_operator_error(run, CLI_CASES[name].says)
    assert await user_count(eng.sessions) == users  # nothing created, nothing half-imported
    assert model.requests == []


REAL_PROCESS = ["export-hostile-names", "import-binary", "import-deep-json"]


@pytest.fixture(scope="module")
async def cli_processes(model, pg_url, hschema, tmp_path_factory) -> dict[str, CliRun]:
    """A few cases as real `python -m bot.cli` processes, all at once (each takes a second)."""
    env = cli_env(model, pg_url, hschema)
    folder = tmp_path_factory.mktemp("hostile-cli")

    async def run(name: str) -> tuple[str, CliRun]:
        args = cli_args(name, folder) if name in CLI_CASES else PARSE_ERRORS[name]
        proc = await asyncio.create_subprocess_exec(
            *COMPANION,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return name, CliRun(-1, "", "timed out")
        return name, CliRun(proc.returncode or 0, out.decode(), err.decode())

    return dict(await asyncio.gather(*(run(n) for n in REAL_PROCESS)))


@pytest.mark.parametrize(
    "name",
    [case(n, *([xbug(CLI_BUGS[n])] if n in CLI_BUGS else []), id=n) for n in REAL_PROCESS],
)
async def test_cli_real_process(cli_processes, name):
    run = cli_processes[name]
    assert run.code == 2, run
    if name in PARSE_ERRORS:
        assert "Traceback" not in run.err and "error:" in run.err and run.out == ""
    else:
        assert_operator_error(run, CLI_CASES[name].says)


# =============================================================================================
# 7. Commands: Slack's /companion
# =============================================================================================


async def slash_companion(rig: SlackRig, text_: str, user_id: str) -> list[dict[str, Any]]:
    before = len(rig.api.responses)
    form = {
        "token": "legacy",
        "team_id": TEAM,
        "user_id": user_id,
        "command": "/companion",
        "text": text_,
        "channel_id": "C1",
        "trigger_id": "t",
        "response_url": f"{rig.api.root}/respond/{next(_ts)}",
    }
    body = urlencode(form)
    headers = {**signed(body, SECRET), "content-type": "application/x-www-form-urlencoded"}
    response = await rig.app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
    assert response.status == 200
    return rig.api.responses[before:]


async def slack_press(rig: SlackRig, action_id: str, value: str, user_id: str) -> list[dict]:
    before = len(rig.api.responses)
    payload = {
        "type": "block_actions",
        "user": {"id": user_id},
        "team": {"id": TEAM},
        "api_app_id": "A1",
        "token": "legacy",
        "trigger_id": "t",
        "response_url": f"{rig.api.root}/respond/{next(_ts)}",
        "container": {},
        "actions": [{"action_id": action_id, "value": value, "type": "button", "block_id": "b"}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    headers = {**signed(body, SECRET), "content-type": "application/x-www-form-urlencoded"}
    assert (await rig.app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))).status
    return rig.api.responses[before:]


HELP_FIRST = "memory: show what I remember about you"
SLACK_COMMANDS = {
    # (text, who: member | admin | ops, expected words)
    "nothing": ("", "member", HELP_FIRST),
    "unknown": ("frobnicate now", "member", HELP_FIRST),
    "shouting-unknown": ("DROP TABLE users", "member", HELP_FIRST),
    "quiet-no-hours": ("quiet", "member", HELP_FIRST),
    "quiet-garbage": ("quiet 25:99-x", "member", "write quiet hours like 22:00-09:00"),
    "quiet-out-of-range": ("quiet 25-99", "member", "hours go from 00 to 23"),
    "quiet-one-time": ("quiet 22:00", "member", "write quiet hours like"),
    "quiet-injection": ("quiet 22-7; DROP TABLE users", "member", "write quiet hours like"),
    "quiet-huge-number": ("quiet 99999999999999999999-1", "member", "write quiet hours like"),
    "timezone-missing": ("timezone", "member", HELP_FIRST),
    "timezone-traversal": ("timezone ../../etc", "member", "is not a time zone"),
    "timezone-absolute": ("timezone /etc/localtime", "member", "is not a time zone"),
    "timezone-region-only": ("timezone Europe", "member", "is not a time zone"),
    "timezone-huge": ("timezone " + "A" * 5000, "member", "is not a time zone"),
    "timezone-nul": ("timezone UTC\x00", "member", "is not a time zone"),
    "openers-maybe": ("openers maybe", "member", HELP_FIRST),
    "openers-missing": ("openers", "member", HELP_FIRST),
    "memory-unknown-member": ("memory", "member", NOTHING_YET),
    "export-unknown-member": ("export", "member", NOTHING_YET),
    "admin-not-allowed": ("admin export <@U2>", "member", NOT_ADMIN),
    "admin-reset-not-allowed": ("admin reset <@U2>", "member", NOT_ADMIN),
    "admin-welcome-not-allowed": ("admin welcome off", "member", NOT_ADMIN),
    "admin-no-action": ("admin", "admin", "Usage: /companion admin"),
    "admin-unknown-action": ("admin obliterate <@U2>", "admin", "Usage: /companion admin"),
    "admin-mention-garbage": ("admin reset @bob", "admin", "Usage: /companion admin"),
    "admin-empty-mention": ("admin export <@>", "admin", "Usage: /companion admin"),
    "admin-lower-case-id": ("admin export <@u2>", "admin", "Usage: /companion admin"),
    "admin-welcome-maybe": ("admin welcome maybe", "admin", "Usage: /companion admin"),
    "admin-export-unknown-member": ("admin export <@UNOBODY>", "ops", "no memory of <@UNOBODY>"),
}
AUDITED = {"admin-export-unknown-member"}


@pytest.mark.parametrize("name", list(SLACK_COMMANDS))
async def test_slack_command(slack, db, members, name):
    words, who, expected = SLACK_COMMANDS[name]
    actor = {"member": slack_uid(), "admin": "UADMIN", "ops": "UOPS"}[who]
    audits, users = await audit_count(db), await user_count(db)
    welcome = await members.tenant_settings(SLACK_TENANT)
    answers = await slash_companion(slack, words, actor)
    (answer,) = answers
    assert answer["response_type"] == "ephemeral"
    assert expected in answer["text"], answer["text"]
    assert "Traceback" not in answer["text"] and len(answer["text"]) < 3000
    if expected != HELP_FIRST:
        assert_one_line(answer["text"])
    assert await audit_count(db) == audits + (name in AUDITED)
    assert await user_count(db) == users, "a refused command created a member"
    assert await members.tenant_settings(SLACK_TENANT) == welcome
    assert await members.view(SLACK_TENANT, actor) is None or actor in ("UADMIN", "UOPS")


async def test_slack_admin_reset_of_an_unknown_member(slack, db, members):
    audits, users = await audit_count(db), await user_count(db)
    (asked,) = await slash_companion(slack, "admin reset <@UGHOST>", "UADMIN")
    button = asked["blocks"][1]["elements"][0]
    assert button["value"] == "UGHOST"
    assert await audit_count(db) == audits  # a question is not an action
    (done,) = await slack_press(slack, RESET, button["value"], "UADMIN")
    assert_one_line(done["text"])
    assert "UGHOST" in done["text"] and "already empty" in done["text"]
    assert await audit_count(db) == audits + 1  # the confirmed reset is audited
    assert await user_count(db) == users  # and created nobody
    (entry,) = await members.audit_log(SLACK_TENANT, limit=1)
    assert (entry.actor, entry.action, entry.target) == ("UADMIN", "reset", "UGHOST")


async def test_slack_reset_button_pressed_by_a_member_changes_nothing(slack, db):
    audits = await audit_count(db)
    (answer,) = await slack_press(slack, RESET, "UADMIN", slack_uid())
    assert answer["text"] == NOT_ADMIN
    assert await audit_count(db) == audits


# =============================================================================================
# 8. Commands: Discord's slash commands
# =============================================================================================


async def discord_slash(
    rig: DiscordRig,
    name: str,
    *options: dict[str, Any],
    who: int | None = None,
    permissions: int = 0,
    in_dm: bool = False,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    who = who or snowflake()
    if in_dm:
        payload = command(
            APP_ID, user(who, "Someone"), name, list(options), guild_id=None, channel_id=snowflake()
        )
    else:
        payload = command(
            APP_ID,
            member(who, f"M{who % 1000}", permissions=permissions),
            name,
            list(options),
            guild_id=GUILD,
            channel_id=GENERAL,
            resolved=resolved,
        )
    rig.state.parse_interaction_create(payload)
    await settle()
    return payload


def option(name: str, value: Any, kind: int = STRING) -> dict[str, Any]:
    return {"name": name, "type": kind, "value": value}


def ghost(user_id: int) -> dict[str, Any]:
    return {"users": {str(user_id): user(user_id, "Ghost")}}


GHOST = 1_200_000_000_000_000_099
DISCORD_COMMANDS: dict[str, tuple[Callable[[], tuple], dict[str, Any], str]] = {
    "timezone-traversal": (
        lambda: ("timezone", option("zone", "../../etc")),
        {},
        "is not a time zone",
    ),
    "timezone-region-only": (lambda: ("timezone", option("zone", "Europe")), {}, "not a time"),
    "timezone-empty": (lambda: ("timezone", option("zone", "")), {}, "is not a time zone"),
    "timezone-huge": (lambda: ("timezone", option("zone", "B" * 5000)), {}, "not a time zone"),
    "timezone-surrogate": (lambda: ("timezone", option("zone", "caf\udce9")), {}, "not a time"),
    "quiet-garbage": (lambda: ("quiet-hours", option("hours", "25:99-x")), {}, "like 22:00"),
    "quiet-out-of-range": (lambda: ("quiet-hours", option("hours", "24-7")), {}, "00 to 23"),
    "quiet-empty": (lambda: ("quiet-hours", option("hours", "")), {}, "like 22:00-09:00"),
    "quiet-nul": (lambda: ("quiet-hours", option("hours", "22\x00-7")), {}, "like 22:00"),
    "memory-show-unknown": (lambda: ("memory", subcommand("show")), {}, NOTHING_YET),
    "memory-export-unknown": (lambda: ("memory", subcommand("export")), {}, NOTHING_YET),
    "admin-export-not-allowed": (
        lambda: ("admin", subcommand("export", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST)},
        NOT_ADMIN,
    ),
    "admin-reset-view-only-permissions": (
        lambda: ("admin", subcommand("reset", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST), "permissions": 0x400 | 0x800},
        NOT_ADMIN,
    ),
    "admin-welcome-not-allowed": (
        lambda: ("admin", subcommand("welcome", enabled=(BOOLEAN, False))),
        {},
        NOT_ADMIN,
    ),
    "admin-welcome-in-a-dm": (
        lambda: ("admin", subcommand("welcome", enabled=(BOOLEAN, False))),
        {"in_dm": True},
        NOT_ADMIN,
    ),
    "admin-export-unknown-member": (
        lambda: ("admin", subcommand("export", member=(USER, str(GHOST)))),
        {"resolved": ghost(GHOST), "permissions": MANAGE_GUILD},
        "I have no memory of Ghost.",
    ),
}


@pytest.mark.parametrize("name", list(DISCORD_COMMANDS))
async def test_discord_command(dc, db, members, name):
    build, extra, expected = DISCORD_COMMANDS[name]
    who = snowflake()
    audits, users = await audit_count(db), await user_count(db)
    welcome = await members.tenant_settings(DISCORD_TENANT)
    payload = await discord_slash(dc, *build(), who=who, **extra)
    answers = [a for a in dc.answers(payload) if a]
    assert answers, "no answer"
    assert expected in answers[-1], answers
    for answer in answers:
        assert_one_line(answer)
        assert answer != SORRY and len(answer) <= DISCORD_LIMIT
    for callback in dc.api.callbacks(payload):
        assert callback.body["data"]["flags"] & 64  # ephemeral
    assert await audit_count(db) == audits + (name == "admin-export-unknown-member")
    assert await user_count(db) == users, "a refused command created a member"
    assert await members.view(DISCORD_TENANT, str(who)) is None
    assert await members.tenant_settings(DISCORD_TENANT) == welcome


@xbug(
    "minor (Discord itself only sends the declared choices): adapters/discord/commands.py "
    "openers treats any value but 'on' as 'off', so 'maybe' turns openers off and answers "
    "'Openers maybe: I only answer.' instead of refusing"
)
async def test_discord_openers_outside_the_choices_changes_nothing(dc, db, members):
    who = snowflake()
    await members.settings(DISCORD_TENANT, str(who), openers=True)
    payload = await discord_slash(dc, "openers", option("setting", "maybe"), who=who)
    answers = [a for a in dc.answers(payload) if a]
    assert answers and all(a != SORRY for a in answers), answers
    assert (await members.view(DISCORD_TENANT, str(who))).settings.get("openers") is True


async def test_discord_unknown_command_gets_an_answer(dc, db):
    users = await user_count(db)
    payload = await discord_slash(dc, "frobnicate", option("x", "y"))
    # Discord only sends commands the bot registered; a stale one still gets a reply (the
    # generic apology: not precise, but an answer, ephemeral, and nothing changes).
    (answer,) = dc.answers(payload)
    assert_one_line(answer)
    assert all(c.body["data"]["flags"] & 64 for c in dc.api.callbacks(payload))
    assert await user_count(db) == users


async def test_discord_admin_reset_of_an_unknown_member_is_audited_once(dc, db, members):
    audits, users = await audit_count(db), await user_count(db)
    asked = await discord_slash(
        dc,
        "admin",
        subcommand("reset", member=(USER, str(GHOST))),
        who=MOD,
        permissions=MANAGE_GUILD,
        resolved=ghost(GHOST),
    )
    assert "Are you sure?" in dc.answers(asked)[0]
    assert await audit_count(db) == audits
    clicked = await discord_click(dc, MOD, asked, "Erase", permissions=MANAGE_GUILD)
    assert dc.answers(clicked)[-1] == "I had no memory of Ghost."
    assert await audit_count(db) == audits + 1
    assert await user_count(db) == users


async def test_discord_admin_reset_confirmed_after_losing_the_right_does_nothing(dc, db):
    audits = await audit_count(db)
    asked = await discord_slash(
        dc,
        "admin",
        subcommand("reset", member=(USER, str(GHOST))),
        who=MOD,
        permissions=MANAGE_GUILD,
        resolved=ghost(GHOST),
    )
    clicked = await discord_click(dc, MOD, asked, "Erase", permissions=0)
    assert dc.answers(clicked)[-1] == NOT_ADMIN
    assert await audit_count(db) == audits


async def test_discord_forget_of_an_unknown_member(dc, db):
    who = snowflake()
    asked = await discord_slash(dc, "memory", subcommand("forget"), who=who)
    assert dc.answers(asked) == [FORGET_ASK]
    clicked = await discord_click(dc, who, asked, "Erase")
    assert dc.answers(clicked)[-1] == NOTHING_YET
    assert await scope_of(db, DISCORD_TENANT, str(who)) is None


async def discord_click(
    rig: DiscordRig, who: int, asked: dict[str, Any], label: str, permissions: int = 0
) -> dict[str, Any]:
    shown = rig.api.shown[int(asked["id"])]
    buttons = [c for row in shown["components"] for c in row["components"]]
    custom_id = next(b["custom_id"] for b in buttons if b["label"] == label)
    caller = member(who, f"M{who % 1000}", permissions=permissions)
    payload = button_click(APP_ID, caller, shown, custom_id, guild_id=GUILD, channel_id=GENERAL)
    rig.state.parse_interaction_create(payload)
    await settle()
    return payload


# =============================================================================================
# 9. Garbage from the model endpoint
# =============================================================================================


def raw_completion(message_: Any, **top: Any) -> dict[str, Any]:
    body = completion("x")
    body["choices"][0]["message"] = message_
    body.update(top)
    return body


def fn_call(name: Any = "send_message", arguments: Any = "{}", **extra: Any) -> dict:
    call = {"id": f"call_{next(_ids)}", "type": "function"}
    call["function"] = {"name": name, "arguments": arguments}
    call.update(extra)
    return call


def with_calls(*items: dict[str, Any]) -> dict[str, Any]:
    return raw_completion({"role": "assistant", "content": None, "tool_calls": list(items)})


@dataclass(frozen=True)
class Garbage:
    first: Callable[[], Any]  # the answer to every request that does not follow a tool result
    tool_error: str | None = None  # what the first tool result must say
    recovered: bool = True  # after a tool result the model says "recovered"


def brain_for(spec: Garbage) -> Callable[[dict[str, Any]], Any]:
    def brain(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return summary_of(body)
        if spec.recovered and last(body).get("role") == "tool":
            return say("recovered")
        return spec.first()

    return brain


def searching(n: int, **args: Any) -> Callable[[], Any]:
    return lambda: calls(*[tool_call("conversation_search", **args) for _ in range(n)])


def nested(depth: int) -> str:
    return '{"message": ' + "[" * depth + "]" * depth + "}"


HUGE_THOUGHT = PROSE * 1300  # about 100 KB of private "thinking" each step

GARBAGE: dict[str, Garbage] = {
    # the body itself
    "body-not-json": Garbage(lambda: web.Response(text="I am not JSON", content_type="text/plain")),
    "body-empty": Garbage(lambda: web.Response(body=b"", content_type="application/json")),
    "body-null": Garbage(lambda: web.json_response(None)),
    "body-array": Garbage(lambda: web.json_response([1, 2, 3])),
    "body-number": Garbage(lambda: web.json_response(42)),
    "body-string": Garbage(lambda: web.json_response("hello")),
    "body-binary": Garbage(
        lambda: web.Response(body=bytes(range(256)), content_type="application/json")
    ),
    "choices-string": Garbage(lambda: {"choices": "abc"}),
    "choices-numbers": Garbage(lambda: {"choices": [1, 2]}),
    "message-is-string": Garbage(lambda: raw_completion("hello there")),
    "message-is-list": Garbage(lambda: raw_completion(["hello"])),
    # wrong types inside the message
    "content-number": Garbage(lambda: raw_completion({"role": "assistant", "content": 42})),
    "content-list": Garbage(
        lambda: raw_completion(
            {"role": "assistant", "content": [{"type": "text", "text": "Hi there!"}]}
        )
    ),
    "content-object": Garbage(lambda: raw_completion({"role": "assistant", "content": {"a": 1}})),
    "content-nul-and-surrogates": Garbage(lambda: completion("hi\x00 there \ud800 friend")),
    "tool-calls-dict": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": fn_call()})
    ),
    "tool-calls-string": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": "send_message"})
    ),
    "tool-call-without-function": Garbage(
        lambda: raw_completion({"role": "assistant", "tool_calls": [{"id": "a", "type": "x"}]})
    ),
    "tool-call-function-null": Garbage(
        lambda: raw_completion(
            {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": None}]}
        )
    ),
    "tool-name-number": Garbage(lambda: with_calls(fn_call(123, "{}"))),
    "tool-name-null": Garbage(lambda: with_calls(fn_call(None, "{}")), "unknown function"),
    "tool-arguments-object": Garbage(
        lambda: with_calls(fn_call("send_message", {"message": "hi"}))
    ),
    "tool-arguments-number": Garbage(lambda: with_calls(fn_call("send_message", 42))),
    "tool-arguments-null": Garbage(lambda: with_calls(fn_call("send_message", None)), "missing"),
    "tool-id-number": Garbage(
        lambda: with_calls(fn_call("archival_memory_search", '{"query": "x"}', id=7))
    ),
    "tool-id-missing": Garbage(
        lambda: with_calls(
            {
                "type": "function",
                "function": {"name": "conversation_search", "arguments": '{"query": "x"}'},
            }
        )
    ),
    "tool-id-empty": Garbage(
        lambda: with_calls(fn_call("conversation_search", '{"query": "x"}', id=""))
    ),
    "tool-ids-duplicate": Garbage(
        lambda: with_calls(
            fn_call("conversation_search", '{"query": "a"}', id="same"),
            fn_call("conversation_search", '{"query": "b"}', id="same"),
        )
    ),
    "usage-strings": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": "many", "completion_tokens": "few"}}
    ),
    "usage-negative": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": -50, "completion_tokens": -1}}
    ),
    "usage-absurd": Garbage(
        lambda: {**say("fine"), "usage": {"prompt_tokens": 10**15, "completion_tokens": 10**15}}
    ),
    "finish-reason-garbage": Garbage(
        lambda: {**say("fine"), "choices": [{**say("fine")["choices"][0], "finish_reason": "💥"}]}
    ),
    # function names
    "name-empty": Garbage(lambda: calls(raw_call("", "{}")), "unknown function"),
    "name-blank": Garbage(lambda: calls(raw_call("   ", "{}")), "unknown function"),
    "name-trailing-space": Garbage(
        lambda: calls(raw_call("send_message ", '{"message": "x"}')), "unknown function"
    ),
    "name-upper-case": Garbage(
        lambda: calls(raw_call("SEND_MESSAGE", '{"message": "x"}')), "unknown function"
    ),
    "name-with-nul": Garbage(
        lambda: calls(raw_call("send_message\x00", '{"message": "x"}')), "unknown function"
    ),
    "name-homoglyph": Garbage(
        lambda: calls(raw_call("ѕend_message", '{"message": "x"}')), "unknown function"
    ),
    "name-traversal": Garbage(
        lambda: calls(raw_call("../../etc/passwd", "{}")), "unknown function"
    ),
    "name-dunder": Garbage(lambda: calls(raw_call("__class__", "{}")), "unknown function"),
    "name-engine-internal": Garbage(lambda: calls(raw_call("execute", "{}")), "unknown function"),
    "name-shell": Garbage(
        lambda: calls(raw_call("send_message\nrm -rf /", "{}")), "unknown function"
    ),
    "name-100kb": Garbage(lambda: calls(raw_call("n" * 100_000, "{}")), "unknown function"),
    # arguments
    "args-100kb-garbage": Garbage(
        lambda: calls(raw_call("send_message", "}" + '{["' * 33_000)), "not valid JSON"
    ),
    "args-nested-10k": Garbage(lambda: calls(raw_call("send_message", nested(10_000))), "Error"),
    "args-nested-100": Garbage(
        lambda: calls(raw_call("send_message", nested(100))), "must be a string"
    ),
    "args-nul-escape": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "hi\\u0000there"}'))
    ),
    "args-page-as-string": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page="2"))
    ),
    "args-page-as-word": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page="two")), "must be an integer"
    ),
    "args-page-huge": Garbage(
        lambda: calls(tool_call("conversation_search", query="x", page=10**30)), "Error"
    ),
    "args-page-infinite": Garbage(
        lambda: calls(raw_call("conversation_search", '{"query": "x", "page": 1e400}')),
        "must be an integer",
    ),
    "args-page-negative": Garbage(
        lambda: calls(tool_call("archival_memory_search", query="x", page=-3)),
        "page must be 1 or more",
    ),
    "args-heartbeat-yes": Garbage(
        lambda: calls(
            tool_call("core_memory_append", label="human", content="x", request_heartbeat="yes")
        ),
        "must be a boolean",
    ),
    "args-array": Garbage(lambda: calls(raw_call("send_message", "[1, 2]")), "JSON object"),
    "args-null": Garbage(lambda: calls(raw_call("send_message", "null")), "JSON object"),
    "args-string": Garbage(lambda: calls(raw_call("send_message", '"hello"')), "JSON object"),
    "args-empty": Garbage(lambda: calls(raw_call("send_message", "")), "missing required"),
    "args-trailing-data": Garbage(
        lambda: calls(raw_call("send_message", '{"message": "a"}}')), "not valid JSON"
    ),
    "args-unknown-key": Garbage(
        lambda: calls(tool_call("send_message", message="a", to="bob")), "unknown argument"
    ),
    "args-other-block": Garbage(
        lambda: calls(tool_call("core_memory_append", label="../bob", content="x")),
        "there is no block",
    ),
    "args-block-overflow": Garbage(
        lambda: calls(tool_call("core_memory_append", label="human", content="x" * 100_000)),
        "over its limit",
    ),
    "args-dates-extreme": Garbage(
        lambda: calls(
            tool_call("conversation_search_date", start_date="0001-01-01", end_date="9999-12-31")
        )
    ),
    "args-dates-garbage": Garbage(
        lambda: calls(
            tool_call("conversation_search_date", start_date="yesterday", end_date="2026-02-30")
        ),
        "YYYY-MM-DD",
    ),
    "args-archival-100kb": Garbage(
        lambda: calls(tool_call("archival_memory_insert", content=PROSE * 1300))
    ),
    "args-search-operators": Garbage(
        lambda: calls(tool_call("conversation_search", query="!!! & | :* ( ) <-> '\\"))
    ),
    # fifty calls in one answer
    "50-unknown-functions": Garbage(
        lambda: calls(*[raw_call(f"nope_{i}", "{}") for i in range(50)]), "unknown function"
    ),
    "50-searches": Garbage(searching(50, query="harbour")),
    "50-sends": Garbage(
        lambda: calls(*[tool_call("send_message", message=f"part {i}") for i in range(50)])
    ),
    "50-appends": Garbage(
        lambda: calls(
            *[
                tool_call("core_memory_append", label="human", content="fact " * 60)
                for _ in range(50)
            ]
        )
    ),
    "50-archival-inserts": Garbage(
        lambda: calls(*[tool_call("archival_memory_insert", content=PROSE * 25) for _ in range(50)])
    ),
    "50-mixed-garbage": Garbage(
        lambda: calls(
            *[
                raw_call(n, a)
                for n, a in [
                    ("send_message", "{"),
                    ("", "{}"),
                    ("conversation_search", "[]"),
                    ("x" * 500, "null"),
                ]
                * 13
            ][:50]
        ),
        "Error",
    ),
    # endless chains: the step cap ends them
    "loop-search": Garbage(searching(1, query="anything"), recovered=False),
    "loop-append-with-heartbeat": Garbage(
        lambda: calls(
            tool_call(
                "core_memory_append", label="persona", content="I loop.", request_heartbeat=True
            )
        ),
        recovered=False,
    ),
    "loop-unknown-function": Garbage(lambda: calls(raw_call("think_more", "{}")), recovered=False),
    "loop-empty-answers": Garbage(lambda: completion(None), recovered=False),
    "loop-bad-json": Garbage(lambda: calls(raw_call("send_message", "{{{")), recovered=False),
    "send-with-heartbeat-ends-the-turn": Garbage(
        lambda: calls(tool_call("send_message", message="again?", request_heartbeat=True)),
    ),
    "loop-huge-thoughts": Garbage(
        lambda: calls(raw_call("think_more", "{}"), thought=HUGE_THOUGHT), recovered=False
    ),
    "loop-archival-search": Garbage(
        lambda: calls(tool_call("archival_memory_search", query="x", request_heartbeat=True)),
        recovered=False,
    ),
}
GARBAGE_BUGS = {}


def garbage_cases() -> list[Any]:
    return [
        case(name, *([xbug(GARBAGE_BUGS[name])] if name in GARBAGE_BUGS else []), id=name)
        for name in GARBAGE
    ]


@pytest.mark.parametrize("name", garbage_cases())
async def test_model_garbage(engines, model, db, name):
    spec = GARBAGE[name]
    engine = engines()  # a fresh token counter: garbage usage must not skew other cases
    model.brain = brain_for(spec)
    scope = await engine.agent("garbage", uid())
    words = f"hello, this is case {name}"

    exchange = await asyncio.wait_for(
        engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, words)), 60
    )

    assert exchange.replies, "the member got no answer"
    for reply in exchange.replies:
        assert_clear(reply)
    assert await said(db, scope) == [words]
    assert len(model.chat_requests) <= CONFIG.max_steps
    assert_prompts_fit(model)
    if spec.tool_error is not None:
        result = next(m for m in model.chat_requests[1]["messages"] if m["role"] == "tool")
        assert result["content"].startswith("Error"), result["content"][:200]
        assert spec.tool_error in result["content"], result["content"][:300]
        assert len(result["content"]) <= CONFIG.max_tool_output_chars + 100
    if not spec.recovered:
        assert len(model.chat_requests) == CONFIG.max_steps
        assert STEP_CAP_REPLY in exchange.replies

    model.brain = default_brain  # and the member's next message is handled normally
    model.requests.clear()
    again = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "are you back?"))
    assert again.replies == ["You said: are you back?"]
    assert_prompts_fit(model)


@pytest.mark.parametrize(
    "spec",
    [
        case((400, "garbage {"), id="http-400-garbage"),
        case((401, ""), id="http-401"),
        case((404, "<html>not here</html>"), id="http-404-html"),
        case((413, "too large"), id="http-413"),
        case((422, json.dumps({"error": {"message": "x" * 5000}})), id="http-422-huge-error"),
        case((503, "\x00\x01\x02"), id="http-503-binary"),
    ],
)
async def test_model_http_errors(engines, model, db, spec):
    code, text_ = spec
    engine = engines()
    model.fail_next(code, text_ or "")
    scope = await engine.agent("garbage", uid())
    exchange = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello?"))
    (reply,) = exchange.replies
    assert_clear(reply)
    assert reply.startswith("Sorry, I can't think right now: the model") and str(code) in reply
    assert len(reply) < 500
    assert await said(db, scope) == ["hello?"]
