"""The Discord client: gateway events in, engine calls out.

    CompanionClient     intents, mention safety, the slash command tree, tenant lookup
      setup_hook        sync the slash commands (once per process, after login)
      on_ready          a new session: read back what was missed (catchup.py)
      on_message        a DM, mention or reply to the bot -> the author's agent
      on_member_join    a welcome by DM, when the community has welcomes on

Tenant = `discord:<guild id>`. DMs belong to the home server: the configured one, else the
only server the bot is in, else the tenant `discord:dm`. Model output never pings anyone but
the member being answered (no @everyone, no roles, no users).
"""

from __future__ import annotations

import logging

import discord

from adapters.common import SORRY, WELCOME_EVENT, Services
from adapters.discord.catchup import catch_up
from adapters.discord.commands import CommandState, CompanionTree, add_commands
from adapters.discord.messages import (
    CHAT_TYPES,
    DISCORD_LIMIT,
    addressed_to,
    guild_id_of,
    handle_message,
)
from adapters.text import split_message
from core.events import EventKind, InboundEvent

log = logging.getLogger(__name__)


def companion_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True  # privileged: the words of messages that mention the bot
    intents.members = True  # privileged: member joins
    return intents


class DirectMessages:
    """The `send` callback for a member's DMs; closed DMs (403) are logged and given up."""

    def __init__(self, member: discord.Member) -> None:
        self.member = member
        self.closed = False

    async def __call__(self, text: str) -> None:
        for part in split_message(text, DISCORD_LIMIT):
            if self.closed:
                return
            try:
                await self.member.send(part)
            except discord.Forbidden:
                self.closed = True
                log.info("member %s of guild %s takes no DMs", self.member.id, self.member.guild.id)


class CompanionClient(discord.Client):
    def __init__(self, services: Services, home_guild_id: int | None = None) -> None:
        super().__init__(
            intents=companion_intents(),
            allowed_mentions=discord.AllowedMentions(
                everyone=False, users=False, roles=False, replied_user=True
            ),
            chunk_guilds_at_startup=False,  # nothing here needs the member list
        )
        self.services = services
        self.home_guild_id = home_guild_id
        self.tree = CompanionTree(self)
        add_commands(self.tree, CommandState(services, self.tenant_for))

    def tenant_for(self, guild_id: int | None) -> str:
        """The tenant of a server; a DM (no server) goes to the home server's tenant."""
        if guild_id is None:
            guild_id = self.home_guild_id
        if guild_id is None and len(self.guilds) == 1:
            guild_id = self.guilds[0].id
        return f"discord:{guild_id}" if guild_id is not None else "discord:dm"

    async def setup_hook(self) -> None:
        try:
            commands = await self.tree.sync()
        except discord.HTTPException:
            log.exception("could not sync the slash commands")
            return
        log.info("synced %d slash commands", len(commands))

    async def on_ready(self) -> None:
        log.info("connected to Discord as %s in %d servers", self.user, len(self.guilds))
        engine = self.services.engine
        engine.activity.start(catch_up(self, engine), "Discord catch-up")

    async def on_message(self, message: discord.Message) -> None:
        me = self.user
        if me is None or message.author.bot or message.webhook_id is not None:
            return
        if message.type not in CHAT_TYPES or not addressed_to(message, me):
            return
        tenant = self.tenant_for(guild_id_of(message))
        try:
            await handle_message(self.services, tenant, message, me)
        except Exception:
            log.exception("message %s in channel %s failed", message.id, message.channel.id)
            try:
                await message.channel.send(SORRY)
            except discord.HTTPException:
                log.warning("could not apologise in channel %s", message.channel.id)

    async def on_member_join(self, member: discord.Member) -> None:
        if member.bot:
            return
        tenant = self.tenant_for(member.guild.id)
        if not await self.services.welcome_enabled(tenant):
            return
        engine = self.services.engine
        scope = await engine.agent(tenant, str(member.id), member.display_name)
        event = InboundEvent(
            EventKind.USER_ACTION,
            WELCOME_EVENT.format(name=member.display_name),
            dedup_key=f"discord:join:{member.guild.id}:{member.id}",
            meta={"platform": "discord", "guild_id": str(member.guild.id)},
        )
        await engine.converse(scope, event, send=DirectMessages(member))
