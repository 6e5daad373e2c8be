"""Slack events into engine events, replies back into Slack messages.

A DM, a mention, a reply in a thread the bot started, or any message in a channel where
the admins made every message for it is a user message for the author's agent (tenant
`slack:<team id>`), unless the admins' rules say otherwise (`Admission.admit`: channels,
DMs, blocked members). The listener stores it and returns, so Slack hears
"received" only for a stored event; the rest happens after (`later.after_ack`): the
member's time zone, a :thinking_face: reaction while the agent works, the shared files,
the turn, the answer in the same place (the DM, or the thread of the message). Redelivered
events (Slack's retries) are stored and answered once: the dedup key is the channel and
message timestamp.

Every call goes out with the token of the workspace the event came from: the listener's
`client` carries it (one SLACK_BOT_TOKEN, or the workspace's installation, see oauth.py).
Outside a request, `Clients` gives a tenant's client.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import Services
from adapters.inbound import (
    SharedFile,
    follow_up,
    message_event,
    never_failing,
    store_message,
    store_welcome,
)
from adapters.slack.later import after_ack
from adapters.slack.posting import Clients, sender
from core.companion import Where
from core.errors import UploadRejected
from core.events import InboundEvent
from core.memory.documents import MAX_UPLOAD_BYTES
from core.ports import Posting, Send
from core.runtime.engine import Engine
from core.runtime.reconnect import when_back
from core.scope import Scope
from core.tenant_key import TenantKey

log = logging.getLogger(__name__)
THINKING = "thinking_face"
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=60)
IGNORED_SUBTYPES = {"bot_message", "message_changed", "message_deleted", "channel_join"}


def one_workspace(client: AsyncWebClient) -> Clients:
    """SLACK_BOT_TOKEN: every tenant is the one workspace that token belongs to."""

    async def same(tenant: str) -> AsyncWebClient:
        return client

    return same


PLATFORM = "slack"  # as tenant keys name it


def tenant_key(team_id: str) -> str:
    """The tenant of a Slack workspace."""
    return str(TenantKey(PLATFORM, team_id))


def tenant_of(body: dict[str, Any], event: dict[str, Any]) -> str:
    return tenant_key(body.get("team_id") or event.get("team") or "")


async def _profile_zone(client: AsyncWebClient, user: str) -> str | None:
    try:
        info = await client.users_info(user=user)
    except Exception as error:  # the zone is a nicety: never worth a failed answer
        log.info("no time zone for %s: %s", user, error)
        return None
    return (info.get("user") or {}).get("tz")


async def _react(client: AsyncWebClient, add: bool, channel: str, ts: str) -> None:
    try:
        if add:
            await client.reactions_add(channel=channel, timestamp=ts, name=THINKING)
        else:
            await client.reactions_remove(channel=channel, timestamp=ts, name=THINKING)
    except SlackApiError as error:  # a missing scope must not stop the answer
        log.info("reaction %s failed: %s", "add" if add else "remove", error.response["error"])


def from_slack(url: str, api_url: str) -> bool:
    """Whether `url` is Slack's own (https on slack.com), or on the host of the Web API the
    client talks to (SLACK_API_URL, a stand-in): the only places the bot token may go."""
    where, api = urlsplit(url), urlsplit(api_url)
    host = where.hostname or ""
    if where.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com")):
        return True
    return (where.scheme, where.netloc) == (api.scheme, api.netloc)


async def _download(file: dict[str, Any], token: str, api_url: str) -> bytes:
    url = file.get("url_private_download") or file.get("url_private")
    if not url:
        raise UploadRejected(f"{file.get('name', 'that file')} has no downloadable content")
    if not from_slack(str(url), api_url):
        log.warning("file %s: its address is not Slack's; not fetched", file.get("id"))
        raise UploadRejected(f"{file.get('name')} is not on Slack, so I did not fetch it")
    async with (
        aiohttp.ClientSession(timeout=DOWNLOAD_TIMEOUT) as http,
        http.get(url, headers={"Authorization": f"Bearer {token}"}) as response,
    ):
        if response.status != 200:
            raise UploadRejected(f"I couldn't download {file.get('name')} (HTTP {response.status})")
        data = bytearray()  # `read(n)` would give only what has arrived so far: one chunk
        async for chunk in response.content.iter_any():
            data += chunk
            if len(data) > MAX_UPLOAD_BYTES:  # larger than Slack said: stop reading
                most = MAX_UPLOAD_BYTES // 1_000_000
                raise UploadRejected(f"{file.get('name')} is over the {most} MB I take")
        return bytes(data)


@dataclass(frozen=True)
class SlackMessage:
    """What the adapter needs of one message event, read from its payload."""

    tenant: str
    team: str
    user: str
    channel: str
    ts: str
    thread_ts: str | None  # where the answer goes: None in a DM, else the thread
    words: str  # empty when the member only shared files
    files: list[SharedFile]

    refs: list[dict[str, Any]]  # the files as Slack named them: enough to fetch them again

    @property
    def meta(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "channel": self.channel,
            "thread_ts": self.thread_ts,
            "slack_files": self.refs,
        }

    def event(self) -> InboundEvent:
        key, written = message_key(self.channel, self.ts), slack_time(self.ts)
        return message_event(self.words, key, self.meta, self.files, written)


def slack_time(ts: str) -> datetime | None:
    """The time a Slack `ts` ("1733312345.000200") names; None for one that names none."""
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        return None


def message_key(channel: str, ts: str) -> str:
    """The dedup key of a Slack message: Slack's own id for it."""
    return f"slack:msg:{channel}:{ts}"


def shared_files(
    refs: list[dict[str, Any]], where: dict[str, Any], token: str, api_url: str
) -> list[SharedFile]:
    return [
        SharedFile(
            name=ref.get("name") or "file",
            size=int(ref.get("size") or 0),
            dedup_key=f"slack:file:{ref.get('id')}",
            read=partial(_download, ref, token, api_url),
            meta=where,
        )
        for ref in refs
    ]


def read_message(
    body: dict[str, Any],
    event: dict[str, Any],
    token: str,
    bot: str,
    api_url: str = AsyncWebClient.BASE_URL,
) -> SlackMessage:
    channel, ts = event["channel"], event["ts"]
    in_dm = event.get("channel_type") == "im"
    thread_ts = event.get("thread_ts") if in_dm else (event.get("thread_ts") or ts)
    keep = ("id", "name", "size", "url_private_download", "url_private")
    refs = [{k: file[k] for k in keep if k in file} for file in event.get("files") or []]
    files = shared_files(refs, {"channel": channel, "thread_ts": thread_ts}, token, api_url)
    words = re.sub(rf"<@{bot}>", "", event.get("text") or "").strip()
    if not words and not files and f"<@{bot}>" in (event.get("text") or ""):
        words = "(calls you without saying anything)"  # a bare mention
    team = body.get("team_id") or event.get("team") or ""
    return SlackMessage(
        tenant_key(team), team, event["user"], channel, ts, thread_ts, words, files, refs
    )


async def handle_message(
    services: Services,
    client: AsyncWebClient,
    body: dict[str, Any],
    message: SlackMessage,
    where: Where,
) -> None:
    """Store the message (if the companion answers it there), and nothing else: Slack
    hears "received" when this returns. One transaction asks the admins' rules, finds the
    member's agent and stores the event; meanwhile the work after earlier acknowledgements
    waits (`Activity.receiving`)."""
    if not message.words and not message.files:
        return
    engine = services.engine
    tell = later(services, client, body, sender(client, message.channel, message.thread_ts))
    admit = partial(services.members.admission.admit, message.tenant, message.user, where)
    async with engine.activity.receiving():
        stored = await store_message(
            engine,
            message.tenant,
            message.user,
            None,
            message.event(),
            bool(message.files),
            tell,
            admit,
        )
        if stored is not None:
            work = answer(services, client, message, *stored)
            after_ack(services, client, body, work)


def later(services: Services, client: AsyncWebClient, body: dict[str, Any], send: Send) -> Send:
    """What the member is told before their message is stored (or instead): sent after
    Slack heard "received", never failing the listener."""

    async def tell(text: str, posting: Posting | None = None) -> None:
        after_ack(services, client, body, never_failing(send)(text))

    return tell


async def answer(
    services: Services, client: AsyncWebClient, message: SlackMessage, scope: Scope, event_id: int
) -> None:
    """After the acknowledgement: the member's time zone, the reaction, files, the turn."""
    user = message.user
    await services.members.zones.adopt(message.tenant, user, lambda: _profile_zone(client, user))
    await _react(client, True, message.channel, message.ts)
    send = sender(client, message.channel, message.thread_ts)
    try:
        # Acknowledged, so Slack will not send it again: a database that went away is waited
        # for (the follow-up is safe to repeat), not apologised for.
        await when_back(
            lambda: follow_up(services.engine, scope, event_id, message.files, send),
            f"Slack message {message.ts}",
        )
    finally:
        await _react(client, False, message.channel, message.ts)


async def finish_held(services: Services, clients: Clients) -> None:
    """At start: messages still held for their files, whose fetcher died with its process.
    Their files are fetched again (Slack keeps them), then the words are answered."""
    engine = services.engine
    for scope, event_id, meta in await engine.seen.held(TenantKey.prefix(PLATFORM)):
        if not meta.get("channel"):
            continue
        where = {"channel": meta["channel"], "thread_ts": meta.get("thread_ts")}
        try:
            client = await clients(tenant_key(meta.get("team") or ""))
            refs = meta.get("slack_files") or []
            files = shared_files(refs, where, client.token or "", client.base_url)
            await follow_up(engine, scope, event_id, files, sender(client, **where))
        except Exception:
            log.warning(
                "held message %s not finished (resume releases it)", event_id, exc_info=True
            )


async def in_its_thread(services: Services, event: dict[str, Any], bot: str) -> bool:
    """A reply without a mention (a mention comes as app_mention) in a thread the bot answers
    in: under the bot's own post, or under the member's own message that called it, whose
    answer went into that message's thread. Others' replies there are not the member's."""
    thread, parent = event.get("thread_ts"), event.get("parent_user_id")
    if not thread or f"<@{bot}>" in (event.get("text") or ""):
        return False
    if parent == bot:
        return True
    called = message_key(event["channel"], thread)
    return parent == event["user"] and await services.engine.seen.stored(called)


def register_events(app: AsyncApp, services: Services) -> None:
    async def bot_user_id(context: Any) -> str:
        return str(context.get("bot_user_id") or "")

    @app.event("message")
    async def on_message(
        body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient, context: Any
    ) -> None:
        if event.get("bot_id") or event.get("subtype") in IGNORED_SUBTYPES or not event.get("user"):
            return
        bot = await bot_user_id(context)
        if event.get("channel_type") == "im":
            where = Where(None)
        elif await in_its_thread(services, event, bot):
            where = Where(event["channel"])
        elif f"<@{bot}>" in (event.get("text") or ""):
            return  # a mention: it comes again as app_mention
        else:  # answered only in a channel where every message is for it
            where = Where(event["channel"], addressed=False)
            reach = await services.members.admission.reach(tenant_of(body, event))
            if not reach.answers(where):
                return
        message = read_message(body, event, client.token or "", bot, client.base_url)
        await handle_message(services, client, body, message, where)

    @app.event("app_mention")
    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient, context: Any
    ) -> None:
        if event.get("bot_id") or not event.get("user"):
            return
        event = {**event, "channel_type": event.get("channel_type", "channel")}
        bot = await bot_user_id(context)
        message = read_message(body, event, client.token or "", bot, client.base_url)
        await handle_message(services, client, body, message, Where(event["channel"]))

    @app.event("team_join")
    async def on_join(body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient) -> None:
        user = event.get("user") or {}
        if user.get("is_bot") or not user.get("id"):
            return
        tenant = tenant_of(body, {"team": user.get("team_id")})
        name = user.get("real_name") or user.get("name") or "Someone"
        engine = services.engine
        async with engine.activity.receiving():
            key = f"slack:join:{tenant}:{user['id']}"
            stored = await store_welcome(
                services, tenant, user["id"], name, key, user.get("real_name")
            )
            if stored is not None:
                work = welcome_by_dm(engine, client, *stored, user)
                after_ack(services, client, body, work)


async def welcome_by_dm(
    engine: Engine, client: AsyncWebClient, scope: Scope, event_id: int, user: dict[str, Any]
) -> None:
    dm = await client.conversations_open(users=user["id"])
    await engine.answer(scope, event_id, sender(client, dm["channel"]["id"], None))
