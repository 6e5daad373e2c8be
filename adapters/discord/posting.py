"""Where replies go in Discord: a channel or a DM, for the shared posting loop.

    DiscordOutlet(channel, me, reference)   one place: posts a part (with a nonce made of
                                            its tag; the first part posted quotes
                                            `reference`), reads the bot's own posts back
    DiscordOutlets(client)                  over REST only (no gateway needed, so a
                                            cron-style `companion tick` delivers too): a DM
                                            to a member, or back where they wrote

The loop itself (split, read back, skip what was posted) is `adapters.posting`. discord.py
asks Discord to enforce a nonce, so a repeat within a few minutes returns the first message
instead of posting a second. For longer gaps the channel is read back; Discord's history
does not show nonces, so a part counts as posted when the bot's own message there has its
exact text: a retried reply word for word the same as one the bot posted in that channel in
the minutes before it was written is taken as posted. Reading needs Read Message History
(part of the invite's permissions); without it the reply goes out again, logged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import discord

from adapters.posting import CannotReadBack, Post, Tag

DISCORD_LIMIT = 2000
READ_BACK = 100  # messages read back at most


class DiscordOutlet:
    """A channel (or a DM) the bot posts in as `me`."""

    limit = DISCORD_LIMIT

    def __init__(
        self,
        channel: discord.abc.Messageable,
        me: discord.abc.Snowflake | None,
        reference: discord.MessageReference | None = None,
    ) -> None:
        self.channel, self.me, self.reference = channel, me, reference

    def markup(self, text: str) -> str:
        return text

    async def post(self, part: str, tag: Tag | None) -> None:
        extra: dict[str, Any] = {}
        if tag is not None:
            extra["nonce"] = str(tag)
        if self.reference is not None:  # the first part posted quotes the member
            extra["reference"], self.reference = self.reference, None
        await self.channel.send(part, **extra)

    async def posted(self, after: datetime) -> list[Post]:
        if self.me is None:  # not signed in yet: nothing of ours to find
            return []
        me = self.me.id
        try:
            return [
                Post(text=message.content)
                async for message in self.channel.history(
                    after=after, limit=READ_BACK, oldest_first=True
                )
                if message.author.id == me
            ]
        except (discord.Forbidden, discord.NotFound) as error:
            raise CannotReadBack(str(error)) from error


class DiscordOutlets:
    """Outside a live handler, over the client's REST API."""

    def __init__(self, client: discord.Client) -> None:
        self.client = client

    async def direct(self, tenant: str, user: str) -> DiscordOutlet:
        member = await self.client.fetch_user(int(user))
        return DiscordOutlet(await member.create_dm(), self.client.user)

    async def written(self, tenant: str, meta: dict[str, Any]) -> DiscordOutlet | None:
        channel_id = meta.get("channel_id")
        if not channel_id:
            return None
        found = self.client.get_channel(int(channel_id))
        channel = found or await self.client.fetch_channel(int(channel_id))
        return DiscordOutlet(channel, self.client.user)  # type: ignore[arg-type]
