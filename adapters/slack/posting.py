"""Where replies go in Slack: a channel, a thread or a DM, for the shared posting loop.

    SlackOutlet(client, channel, thread_ts)   one place: posts a part (its tag in the
                                              message metadata), reads its own posts back
    SlackOutlets(clients)                     a DM to a member, or back where they wrote
    sender(client, channel, thread_ts)        the `Send` of a place

The loop itself (split, read back, skip what was posted) is `adapters.posting`. Reading
back needs the history scopes the manifest asks for; without them (`CANNOT_LOOK`) the
reply goes out again, logged: a second copy rather than none.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.posting import CannotReadBack, Post, Tag, sending
from adapters.text import to_slack_mrkdwn
from core.ports import Send

SLACK_TEXT_LIMIT = 3000  # a section block's text limit
REPLY_EVENT = "companion_reply"  # the metadata event type of a reply's post
# The errors that mean "cannot look here", not "Slack is down": the reply is posted anyway.
CANNOT_LOOK = {"missing_scope", "not_in_channel", "channel_not_found", "no_permission"}

Clients = Callable[[str], Awaitable[AsyncWebClient]]  # tenant -> its workspace's Web API client


def no_pings(text: str) -> str:
    """The model's words must not ping a channel or people: escape Slack's special links."""
    return re.sub(r"<([!@#])", r"&lt;\1", text)


class SlackOutlet:
    """A channel (or a thread in it, or a DM) of one workspace."""

    limit = SLACK_TEXT_LIMIT

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str | None) -> None:
        self.client, self.channel, self.thread_ts = client, channel, thread_ts

    def markup(self, text: str) -> str:
        return no_pings(to_slack_mrkdwn(text))

    async def post(self, part: str, tag: Tag | None) -> None:
        extra: dict[str, Any] = {}
        if tag is not None:
            payload = {"reply": tag.key, "part": tag.part}
            extra["metadata"] = {"event_type": REPLY_EVENT, "event_payload": payload}
        await self.client.chat_postMessage(
            channel=self.channel,
            thread_ts=self.thread_ts,
            text=part,
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": part}}],
            **extra,
        )

    async def posted(self, after: datetime) -> list[Post]:
        channel, oldest = self.channel, f"{after.timestamp():.6f}"
        try:
            if self.thread_ts:
                found = await self.client.conversations_replies(
                    channel=channel,
                    ts=self.thread_ts,
                    oldest=oldest,
                    include_all_metadata=True,
                    limit=200,
                )
            else:
                found = await self.client.conversations_history(
                    channel=channel, oldest=oldest, include_all_metadata=True, limit=200
                )
        except SlackApiError as error:
            code = error.response.get("error")
            if code not in CANNOT_LOOK:
                raise  # Slack is failing: this attempt fails, the next one looks again
            raise CannotReadBack(f"{self.channel}: {code}") from error
        posts = []
        for message in found.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if metadata.get("event_type") == REPLY_EVENT and payload.get("reply"):
                posts.append(Post(tag=str(Tag(payload["reply"], int(payload.get("part", 0))))))
        return posts


def sender(client: AsyncWebClient, channel: str, thread_ts: str | None) -> Send:
    outlet = SlackOutlet(client, channel, thread_ts)

    async def here() -> SlackOutlet:
        return outlet

    return sending(here)


class SlackOutlets:
    """Outside a live handler: each tenant's workspace through its own client."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    async def direct(self, tenant: str, user: str) -> SlackOutlet:
        client = await self.clients(tenant)
        dm = await client.conversations_open(users=user)
        return SlackOutlet(client, dm["channel"]["id"], None)

    async def written(self, tenant: str, meta: dict[str, Any]) -> SlackOutlet | None:
        if not meta.get("channel"):
            return None
        return SlackOutlet(await self.clients(tenant), meta["channel"], meta.get("thread_ts"))
