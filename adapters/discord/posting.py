"""Replies into Discord messages, posted once as the member sees them.

    post_reply(channel, me, text, reference)   the reply's parts, skipping parts an earlier
                                               attempt already posted

Each part of an outbox reply is sent with a nonce made of the reply's key and the part's
number; discord.py asks Discord to enforce it, so a repeat within a few minutes returns the
first message instead of posting a second. For longer gaps (a process killed between the
post and marking it sent, the outbox's `Posting.since`), the channel is read back from a
little before that time and the bot's own messages with a part's exact text count as
posted. Reading needs Read Message History (part of the invite's permissions); without it
the reply goes out again (logged): a second copy rather than none. Discord's history does
not show nonces, so a part counts as posted when the bot's own message there has its exact
text: a retried reply word for word the same as one the bot posted in that channel in the
minutes before it was written is taken as posted.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import discord

from adapters.text import split_message
from core.runtime.outbox import Posting, posting

log = logging.getLogger(__name__)
DISCORD_LIMIT = 2000
LOOK_BACK = timedelta(minutes=2)  # clocks differ: read from a little before the reply was made
READ_BACK = 100  # messages read back at most


async def post_reply(
    channel: discord.abc.Messageable,
    me: discord.abc.Snowflake | None,
    text: str,
    reference: discord.MessageReference | None = None,
) -> None:
    """Post `text` in parts of at most DISCORD_LIMIT; the first part posted quotes
    `reference` (the member's message in a server)."""
    reply = posting()
    parts = split_message(text, DISCORD_LIMIT)
    done = await _posted_parts(channel, me, parts, reply) if reply and me else set()
    for number, part in enumerate(parts):
        if number in done:
            continue
        extra: dict[str, Any] = {}
        if reply is not None:
            extra["nonce"] = f"{reply.key}.{number}"
        if reference is not None:
            extra["reference"], reference = reference, None
        await channel.send(part, **extra)


async def _posted_parts(
    channel: discord.abc.Messageable,
    me: discord.abc.Snowflake,
    parts: list[str],
    reply: Posting,
) -> set[int]:
    """The parts of `reply` already in the channel (none to look for on a first attempt)."""
    if reply.since is None:
        return set()
    after = reply.since - LOOK_BACK
    try:
        mine = [
            m.content
            async for m in channel.history(after=after, limit=READ_BACK, oldest_first=True)
            if m.author.id == me.id
        ]
    except (discord.Forbidden, discord.NotFound) as error:
        log.warning(
            "cannot read channel back to see whether reply %s was posted before (%s): posting it",
            reply.key,
            error,
        )
        return set()
    done = {number for number, part in enumerate(parts) if part in mine}
    if done:
        log.info("parts %s of reply %s were posted before: not again", sorted(done), reply.key)
    return done
