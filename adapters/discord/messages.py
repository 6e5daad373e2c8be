"""Discord messages into engine events, and the engine's replies back into the channel.

    addressed_to(message, me)   a DM, a mention of the bot (or its role), a reply to the bot
    where_of(message, me)       the channel (and a thread's parent), None for a DM, addressed
    spoken_text(message, me)    the member's words: the bot's mention dropped, others readable
    shared_file(message, a)     an attachment as a file to take (downloaded only if its name
                                and size pass, and only from Discord, `from_discord`)
    guild_id_of(message)        the server it was posted in, None for a DM
    ChannelReplies              the `send` callback: parts of at most 2000 characters, the
                                first one as a reply to the member's message (in a server)
    handle_message(...)         store the message first, then its attachments, then the
                                words, as the author's own events (adapters/inbound.py)

Only the speaker's own message reaches their agent: never the channel's history, never the
text of the message they reply to, never other members' files.
"""

from __future__ import annotations

import copy
import logging
import re
from contextlib import AsyncExitStack, suppress
from typing import Any
from urllib.parse import urlsplit

import discord

from adapters.common import Services
from adapters.discord.posting import DiscordOutlet
from adapters.discord.tenants import PLATFORM
from adapters.inbound import (
    SharedFile,
    admitted,
    follow_up,
    message_event,
    store_message,
)
from adapters.posting import post_reply
from core.companion import Where
from core.errors import UploadRejected
from core.ports import Posting
from core.runtime.seen import Places

log = logging.getLogger(__name__)

CHAT_TYPES = (discord.MessageType.default, discord.MessageType.reply)
DOWNLOAD_FAILED = "I couldn't download {name} from Discord; please try sending it again."
NOT_DISCORDS = "{name} is not on Discord's servers, so I did not fetch it."
CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")


def from_discord(url: str) -> bool:
    """Whether `url` is Discord's (https on its CDN), or on the host of the API discord.py
    talks to (DISCORD_API_URL, a stand-in): the only places an attachment is fetched from."""
    where, api = urlsplit(url), urlsplit(discord.http.Route.BASE)
    if where.scheme == "https" and where.hostname in CDN_HOSTS:
        return True
    return (where.scheme, where.netloc) == (api.scheme, api.netloc)


def guild_id_of(message: discord.Message) -> int | None:
    """The server a message was posted in (also when that server is not cached), or None."""
    if message.guild is not None:
        return message.guild.id
    return getattr(message.channel, "guild_id", None)  # a PartialMessageable knows it


def addressed_to(message: discord.Message, me: discord.abc.User) -> bool:
    """Whether the bot should answer: a DM, a mention, or a reply to one of its messages."""
    if isinstance(message.channel, discord.DMChannel):
        return True
    if any(user.id == me.id for user in message.mentions):
        return True
    own_role = message.guild.self_role if message.guild else None
    if own_role is not None and own_role in message.role_mentions:
        return True
    reference = message.reference
    if reference is None:
        return False
    replied = reference.resolved or reference.cached_message
    return isinstance(replied, discord.Message) and replied.author.id == me.id


def where_of(message: discord.Message, me: discord.abc.User) -> Where:
    """Where the message was written (a thread inside its channel), and if to the bot."""
    if guild_id_of(message) is None:
        return Where(None)
    parent = getattr(message.channel, "parent_id", None)
    parents = (str(parent),) if parent else ()
    return Where(str(message.channel.id), parents, addressed_to(message, me))


def spoken_text(message: discord.Message, me: discord.abc.User) -> str:
    """The text as the member saw it, without the bot's own mention.

    Other mentions become names (`@Ann`, `#general`) the way `clean_content` renders them.
    """
    own = [rf"<@!?{me.id}>"]
    own_role = message.guild.self_role if message.guild else None
    if own_role is not None:
        own.append(rf"<@&{own_role.id}>")
    stripped = re.sub("|".join(own), "", message.content)
    clone = copy.copy(message)
    clone._update({"content": stripped})  # type: ignore[typeddict-item]  # also drops caches
    return clone.clean_content.strip()


class ChannelReplies:
    """Sends replies to where the member spoke; in a server the first part quotes them."""

    def __init__(self, message: discord.Message, me: discord.abc.User) -> None:
        self.message = message
        self.me = me
        self.quote = guild_id_of(message) is not None

    async def __call__(self, text: str, posting: Posting | None = None) -> None:
        reference = None
        if self.quote:
            reference = self.message.to_reference(fail_if_not_exists=False)
            self.quote = False
        await post_reply(DiscordOutlet(self.message.channel, self.me, reference), text, posting)


# The keys of `_meta` that say where a message was written, for reading channels back.
WHERE = Places(place="channel_id", position="message_id", group="guild_id")


def _meta(message: discord.Message) -> dict[str, Any]:
    guild_id = guild_id_of(message)
    return {
        "platform": PLATFORM,
        "guild_id": str(guild_id) if guild_id else None,
        "channel_id": str(message.channel.id),
        "message_id": str(message.id),
    }


def shared_file(message: discord.Message, attachment: discord.Attachment) -> SharedFile:
    async def read() -> bytes:
        if not from_discord(attachment.url):
            log.warning("attachment %s of message %s is not Discord's", attachment.id, message.id)
            raise UploadRejected(NOT_DISCORDS.format(name=attachment.filename))
        try:
            return await attachment.read()
        except discord.HTTPException as error:
            log.warning("attachment %s of message %s: %s", attachment.id, message.id, error)
            raise UploadRejected(DOWNLOAD_FAILED.format(name=attachment.filename)) from error

    return SharedFile(
        attachment.filename,
        attachment.size,
        f"discord:att:{attachment.id}",
        read,
        {**_meta(message), "attachment_id": str(attachment.id)},
    )


async def handle_message(
    services: Services, tenant: str, message: discord.Message, me: discord.abc.User, where: Where
) -> None:
    """Stored first (if the companion answers it there); then, while typing shows, the
    files and the words beside them."""
    engine = services.engine
    author = message.author
    reply = ChannelReplies(message, me)
    if not await admitted(services, tenant, str(author.id), where, reply):
        return
    files = [shared_file(message, attachment) for attachment in message.attachments]
    text = spoken_text(message, me)
    if not text and not files:
        text = message.clean_content  # a bare mention: the member called the bot
    key, meta = f"discord:msg:{message.id}", _meta(message)
    event = message_event(text, key, meta, files, message.created_at)
    async with engine.activity.working():
        user, name = str(author.id), author.display_name
        stored = await store_message(engine, tenant, user, name, event, bool(files), reply)
        if stored is None:
            return
        scope, event_id = stored
        async with AsyncExitStack() as typing:
            with suppress(discord.HTTPException):  # no typing indicator is no reason to stop
                await typing.enter_async_context(message.channel.typing())
            await follow_up(engine, scope, event_id, files, reply)
