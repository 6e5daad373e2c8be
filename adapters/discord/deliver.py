"""Messages sent outside a live handler, over Discord's REST API: openers (a DM) and
retried replies (to the channel the member wrote in, from the event's meta).

Needs only a logged-in client (`await client.login(token)`), not the gateway, so a
cron-style `companion tick` can deliver too.
"""

from __future__ import annotations

from typing import Any

import discord

from adapters.discord.posting import post_reply


def dm_sender(client: discord.Client):
    async def send(tenant: str, user: str, text: str) -> None:
        member = await client.fetch_user(int(user))
        await post_reply(await member.create_dm(), client.user, text)

    return send


def reply_sender(client: discord.Client):
    """For retries: the send function of an event's replies, from the event's meta."""
    dm = dm_sender(client)

    def route(tenant: str, user: str, meta: dict[str, Any]):
        async def send(text: str) -> None:
            channel_id = meta.get("channel_id")
            if not channel_id:
                await dm(tenant, user, text)
                return
            channel = client.get_channel(int(channel_id)) or await client.fetch_channel(
                int(channel_id)
            )
            await post_reply(channel, client.user, text)  # type: ignore[arg-type]

        return send

    return route
