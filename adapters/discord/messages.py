"""Discord messages into engine events, and the engine's replies back into the channel.

    addressed_to(message, me)   a DM, a mention of the bot (or its role), a reply to the bot
    spoken_text(message, me)    the member's words: the bot's mention dropped, others readable
    upload_refusal(name, size)  why an attachment is refused, decided before downloading it
    guild_id_of(message)        the server it was posted in, None for a DM
    ChannelReplies              the `send` callback: parts of at most 2000 characters, the
                                first one as a reply to the member's message (in a server)
    handle_message(...)         attachments, then the text, as the author's own events

Only the speaker's own message reaches their agent: never the channel's history, never the
text of the message they reply to, never other members' files.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

import discord

from adapters.common import Services
from adapters.text import split_message
from core.errors import EventTooLarge, UploadRejected
from core.events import EventKind, InboundEvent
from core.members.documents import check_upload
from core.scope import Scope

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
CHAT_TYPES = (discord.MessageType.default, discord.MessageType.reply)
DOWNLOAD_FAILED = "I couldn't download {name} from Discord; please try sending it again."


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


def upload_refusal(filename: str, size: int) -> str | None:
    """The reason a file will not be stored, from its name and Discord's size, or None."""
    try:
        check_upload(filename, size)
    except UploadRejected as error:
        return str(error)
    return None


class ChannelReplies:
    """Sends replies to where the member spoke; in a server the first part quotes them."""

    def __init__(self, message: discord.Message) -> None:
        self.message = message
        self.quote = guild_id_of(message) is not None

    async def __call__(self, text: str) -> None:
        for part in split_message(text, DISCORD_LIMIT):
            if self.quote:
                reference = self.message.to_reference(fail_if_not_exists=False)
                await self.message.channel.send(part, reference=reference)
                self.quote = False
            else:
                await self.message.channel.send(part)


def _meta(message: discord.Message) -> dict[str, Any]:
    guild_id = guild_id_of(message)
    return {
        "platform": "discord",
        "guild_id": str(guild_id) if guild_id else None,
        "channel_id": str(message.channel.id),
        "message_id": str(message.id),
    }


async def _upload(
    services: Services,
    scope: Scope,
    message: discord.Message,
    attachment: discord.Attachment,
    reply: ChannelReplies,
) -> None:
    try:
        refusal = upload_refusal(attachment.filename, attachment.size)
        if refusal is not None:
            raise UploadRejected(refusal)
        data = await attachment.read()
        await services.engine.upload(
            scope,
            attachment.filename,
            data,
            dedup_key=f"discord:att:{attachment.id}",
            meta={**_meta(message), "attachment_id": str(attachment.id)},
            send=reply,
        )
    except UploadRejected as error:
        await reply(str(error))
    except discord.HTTPException as error:
        log.warning("attachment %s of message %s: %s", attachment.id, message.id, error)
        await reply(DOWNLOAD_FAILED.format(name=attachment.filename))


async def handle_message(
    services: Services, tenant: str, message: discord.Message, me: discord.abc.User
) -> None:
    """Files first (so the agent knows them), then the words beside them."""
    author = message.author
    scope = await services.engine.agent(tenant, str(author.id), author.display_name)
    reply = ChannelReplies(message)
    async with message.channel.typing():
        for attachment in message.attachments:
            await _upload(services, scope, message, attachment, reply)
        text = spoken_text(message, me)
        if not text and message.attachments:
            return
        event = InboundEvent(
            EventKind.USER_MESSAGE,
            text or message.clean_content,  # a bare mention: the member called the bot
            dedup_key=f"discord:msg:{message.id}",
            meta=_meta(message),
        )
        try:
            await services.engine.converse(scope, event, send=reply)
        except EventTooLarge as error:
            await reply(str(error))
