"""Slack events into engine events, replies back into Slack messages.

A DM, a mention, or a reply in a thread the bot started is a user message for the author's
agent (tenant `slack:<team id>`). The bot answers in the same place: the DM, or the thread
of the message. A :thinking_face: reaction shows while the agent works. Redelivered events
(Slack's retries) are answered once: the dedup key is the channel and message timestamp.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import WELCOME_EVENT, Services
from adapters.text import split_message, to_slack_mrkdwn
from core.errors import EventTooLarge, UploadRejected
from core.events import EventKind, InboundEvent
from core.members.documents import MAX_UPLOAD_BYTES, check_upload

log = logging.getLogger(__name__)
SLACK_TEXT_LIMIT = 3000  # a section block's text limit
THINKING = "thinking_face"
IGNORED_SUBTYPES = {"bot_message", "message_changed", "message_deleted", "channel_join"}


def tenant_key(team_id: str) -> str:
    """The tenant of a Slack workspace."""
    return f"slack:{team_id}"


def tenant_of(body: dict[str, Any], event: dict[str, Any]) -> str:
    return tenant_key(body.get("team_id") or event.get("team") or "")


def no_pings(text: str) -> str:
    """The model's words must not ping a channel or people: escape Slack's special links."""
    return re.sub(r"<([!@#])", r"&lt;\1", text)


def sender(client: AsyncWebClient, channel: str, thread_ts: str | None):
    async def send(text: str) -> None:
        for part in split_message(no_pings(to_slack_mrkdwn(text)), SLACK_TEXT_LIMIT):
            await client.chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=part,
                blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": part}}],
            )

    return send


def dm_sender(client: AsyncWebClient):
    """Messages the bot starts (openers): a DM to the member."""

    async def send(tenant: str, user: str, text: str) -> None:
        dm = await client.conversations_open(users=user)
        await sender(client, dm["channel"]["id"], None)(text)

    return send


def reply_sender(client: AsyncWebClient):
    """For retries: the send function of an event's replies, from the event's meta."""
    dm = dm_sender(client)

    def route(tenant: str, user: str, meta: dict[str, Any]):
        if meta.get("channel"):
            return sender(client, meta["channel"], meta.get("thread_ts"))

        async def to_dm(text: str) -> None:
            await dm(tenant, user, text)

        return to_dm

    return route


async def _profile_zone(client: AsyncWebClient, user: str) -> str | None:
    try:
        info = await client.users_info(user=user)
    except SlackApiError:
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


async def _download(file: dict[str, Any], token: str) -> bytes:
    url = file.get("url_private_download") or file.get("url_private")
    if not url:
        raise UploadRejected(f"{file.get('name', 'that file')} has no downloadable content")
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers={"Authorization": f"Bearer {token}"}) as response,
    ):
        if response.status != 200:
            raise UploadRejected(f"I couldn't download {file.get('name')} (HTTP {response.status})")
        return await response.content.read(MAX_UPLOAD_BYTES + 1)


async def _handle_files(
    services: Services, scope: Any, event: dict[str, Any], token: str, send: Any
) -> None:
    for file in event.get("files") or []:
        name = file.get("name") or "file"
        try:
            check_upload(name, int(file.get("size") or 0))
            data = await _download(file, token)
            await services.engine.upload(
                scope, name, data, dedup_key=f"slack:file:{file.get('id')}", send=send
            )
        except UploadRejected as error:
            await send(str(error))


async def handle_message(
    services: Services,
    client: AsyncWebClient,
    body: dict[str, Any],
    event: dict[str, Any],
    token: str,
    bot_user: str,
) -> None:
    channel, ts, user = event["channel"], event["ts"], event["user"]
    in_dm = event.get("channel_type") == "im"
    thread_ts = event.get("thread_ts") if in_dm else (event.get("thread_ts") or ts)
    text = re.sub(rf"<@{bot_user}>", "", event.get("text") or "").strip()
    tenant = tenant_of(body, event)
    scope = await services.engine.agent(tenant, user)
    await services.members.adopt_timezone(tenant, user, lambda: _profile_zone(client, user))
    send = sender(client, channel, thread_ts)
    await _react(client, True, channel, ts)
    try:
        await _handle_files(services, scope, event, token, send)
        called = f"<@{bot_user}>" in (event.get("text") or "")  # a bare mention
        if text or (called and not event.get("files")):
            message = InboundEvent(
                EventKind.USER_MESSAGE,
                text or "(calls you without saying anything)",
                f"slack:msg:{channel}:{ts}",
                {"channel": channel, "thread_ts": thread_ts},
            )
            try:
                await services.engine.converse(scope, message, send=send)
            except EventTooLarge as error:
                await send(str(error))
    finally:
        await _react(client, False, channel, ts)


def register_events(app: AsyncApp, services: Services, token: str) -> None:
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
            await handle_message(services, client, body, event, token, bot)
        elif event.get("parent_user_id") == bot and f"<@{bot}>" not in (event.get("text") or ""):
            await handle_message(services, client, body, event, token, bot)  # a thread reply

    @app.event("app_mention")
    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient, context: Any
    ) -> None:
        if event.get("bot_id") or not event.get("user"):
            return
        event = {**event, "channel_type": event.get("channel_type", "channel")}
        await handle_message(services, client, body, event, token, await bot_user_id(context))

    @app.event("team_join")
    async def on_join(body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient) -> None:
        user = event.get("user") or {}
        if user.get("is_bot") or not user.get("id"):
            return
        tenant = tenant_of(body, {"team": user.get("team_id")})
        if not await services.welcome_enabled(tenant):
            return
        scope = await services.engine.agent(tenant, user["id"], user.get("real_name"))
        dm = await client.conversations_open(users=user["id"])
        name = user.get("real_name") or user.get("name") or "Someone"
        welcome = InboundEvent(
            EventKind.USER_ACTION,
            WELCOME_EVENT.format(name=name),
            f"slack:join:{tenant}:{user['id']}",
        )
        await services.engine.converse(
            scope, welcome, send=sender(client, dm["channel"]["id"], None)
        )
