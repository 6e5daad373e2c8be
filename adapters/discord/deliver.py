"""Messages the bot starts (openers): a DM to a member over Discord's REST API.

Needs only a logged-in client (`await client.login(token)`), not the gateway, so a
cron-style `companion tick` can deliver too.
"""

from __future__ import annotations

import discord

from adapters.text import split_message

DISCORD_LIMIT = 2000


def dm_sender(client: discord.Client):
    async def send(tenant: str, user: str, text: str) -> None:
        member = await client.fetch_user(int(user))
        for part in split_message(text, DISCORD_LIMIT):
            await member.send(part)

    return send
