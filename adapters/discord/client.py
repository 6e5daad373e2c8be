"""The Discord client: gateway events in, engine calls out.

    CompanionClient     intents, mention safety, the slash command tree, tenant lookup
      setup_hook        sync the slash commands (once per process, after login)
      on_ready          a new session: read back what was missed (catchup.py)
      on_message        a DM, mention or reply to the bot -> the author's agent
                        (both wait for a database that went away, core.runtime.reconnect)
      on_member_join    a welcome by DM, when the community has welcomes on

Tenant = `discord:<guild id>`. A member's DMs belong to their DM home (core.members.dm_homes):
one community, picked at their first DM (the configured home server, else where they talked
most recently, else the only server) and kept when the bot joins more servers; the member
moves it with `/memory home`. Model output never pings anyone but the member being answered
(no @everyone, no roles, no users).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import discord

from adapters.common import SORRY, Services
from adapters.discord.catchup import catch_up
from adapters.discord.commands import CommandState
from adapters.discord.messages import (
    CHAT_TYPES,
    guild_id_of,
    handle_message,
    where_of,
)
from adapters.discord.posting import DiscordOutlet
from adapters.discord.tenants import PLATFORM, guild_of, tenant_key
from adapters.discord.tree import CompanionTree, add_commands
from adapters.discord.unstored import Unstored
from adapters.inbound import store_welcome
from adapters.posting import post_reply
from core.companion import Where
from core.ports import Posting
from core.runtime.reconnect import when_back

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

    def __init__(self, member: discord.Member, me: discord.abc.User | None) -> None:
        self.member = member
        self.me = me
        self.closed = False

    async def __call__(self, text: str, posting: Posting | None = None) -> None:
        if self.closed:
            return
        try:
            await post_reply(DiscordOutlet(await self.member.create_dm(), self.me), text, posting)
        except discord.Forbidden:
            self.closed = True
            log.info("member %s of guild %s takes no DMs", self.member.id, self.member.guild.id)


Status = Callable[[str, str], None]  # (state, detail): see bot.health
PERMISSIONS = 274878008320  # what the bot needs in a server (deploy/discord-setup.md)


def invite_url(application_id: int) -> str:
    return discord.utils.oauth_url(
        application_id,
        permissions=discord.Permissions(PERMISSIONS),
        scopes=("bot", "applications.commands"),
    )


class CompanionClient(discord.Client):
    def __init__(
        self,
        services: Services,
        home_guild_id: int | None = None,
        on_status: Status | None = None,
        unstored: Unstored | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            intents=companion_intents(),
            allowed_mentions=discord.AllowedMentions(
                everyone=False, users=False, roles=False, replied_user=True
            ),
            chunk_guilds_at_startup=False,  # nothing here needs the member list
            **options,  # the shards, for a sharded client (shards.py)
        )
        self.services = services
        self.home_guild_id = home_guild_id
        self.on_status = on_status or (lambda state, detail: None)
        self.unstored = unstored or Unstored(None)
        self.tree = CompanionTree(self)
        add_commands(self.tree, CommandState(services, self.tenant_of, self.server_name))

    async def tenant_of(self, guild_id: int | None, user_id: int, keep: bool = True) -> str:
        """The tenant of a server; for a DM (no server), the member's DM home (recorded at
        their first message; a command only asks where it is or would be)."""
        if guild_id is not None:
            return tenant_key(guild_id)
        served = await self.served_to(user_id)
        configured = tenant_key(self.home_guild_id) if self.home_guild_id else None
        return await self.services.members.dm_homes.resolve(
            PLATFORM, str(user_id), served, configured, keep
        )

    async def served_to(self, user_id: int) -> list[str]:
        """The communities a member's DMs may belong to: the servers shared with them, else
        every server of the bot."""
        user = self.get_user(user_id)
        shared = [g.id for g in user.mutual_guilds] if user else []
        return [tenant_key(g) for g in shared or [g.id for g in self.guilds]]

    def server_name(self, tenant: str) -> str:
        """A tenant as its members know it: the server's name when the bot is in it."""
        guild_id = guild_of(tenant)
        guild = self.get_guild(guild_id) if guild_id is not None else None
        return guild.name if guild else tenant

    @property
    def syncs_commands(self) -> bool:
        """Whether this process syncs the slash commands (one process per application)."""
        return True

    def reads_back(self, guild_id: int | None) -> bool:
        """Whether this process catches up on a channel of that server (None: a DM)."""
        return True

    async def setup_hook(self) -> None:
        if not self.syncs_commands:
            return
        try:
            commands = await self.tree.sync()
        except discord.HTTPException:
            log.exception("could not sync the slash commands")
            return
        log.debug("synced %d slash commands", len(commands))

    async def on_ready(self) -> None:
        self.announce()
        engine = self.services.engine
        work = when_back(lambda: catch_up(self, engine, self.unstored), "the Discord catch-up")
        engine.activity.start(work, "Discord catch-up")

    def announce(self) -> None:
        """`connected`: who the bot is, in how many servers, and how to invite it."""
        me, servers = self.user, len(self.guilds)
        invite = invite_url(self.application_id) if self.application_id else "unknown"
        self.on_status(
            "connected",
            f"connected as {me} (id {me.id if me else '?'}) in {servers} servers; "
            f"invite it to a server with {invite}",
        )

    async def on_disconnect(self) -> None:
        if not self.is_closed():  # closing it (a clean stop) drops it too: no news
            self.on_status("retrying", "the gateway connection dropped; reconnecting")

    async def on_resumed(self) -> None:
        self.on_status("connected", f"reconnected as {self.user} (session resumed)")

    async def on_message(self, message: discord.Message) -> None:
        me = self.user
        if me is None or message.author.bot or message.webhook_id is not None:
            return
        if message.type not in CHAT_TYPES:
            return
        guild_id = guild_id_of(message)
        try:
            # Discord will not send it again: a database that went away is waited for (its
            # handling is safe to repeat), noted on disk meanwhile so that a new session reads
            # its channel back should this process die first (unstored.py).
            await when_back(
                lambda: self._take(message, me),
                f"Discord message {message.id}",
                on_wait=lambda: self.unstored.note(message.id, message.channel.id, guild_id),
            )
            self.unstored.done(message.id)
        except Exception:
            self.unstored.done(message.id)
            log.exception("message %s in channel %s failed", message.id, message.channel.id)
            try:
                await message.channel.send(SORRY)
            except discord.HTTPException:
                log.warning("could not apologise in channel %s", message.channel.id)

    async def _take(self, message: discord.Message, me: discord.ClientUser) -> None:
        where, guild_id = where_of(message, me), guild_id_of(message)
        if guild_id is not None and isinstance(message.channel, discord.PartialMessageable):
            where = await self._inside(where, message.channel.id)
        if not where.addressed and not await self._open_channel(guild_id, where):
            return
        tenant = await self.tenant_of(guild_id, message.author.id)
        await handle_message(self.services, tenant, message, me, where)

    async def _inside(self, where: Where, channel_id: int) -> Where:
        """A channel discord.py has not cached (an archived thread, a server not loaded
        yet) names no parent: ask Discord, so a thread keeps its channel's rules."""
        channel = await self.fetch_channel(channel_id)
        parent = getattr(channel, "parent_id", None)
        return replace(where, parents=(str(parent),) if parent else ())

    async def _open_channel(self, guild_id: int | None, where: Where) -> bool:
        """A message not addressed to the bot, in a channel where every message is for it."""
        if guild_id is None:
            return False
        reach = await self.services.members.admission.reach(tenant_key(guild_id))
        return reach.answers(where)

    async def on_member_join(self, member: discord.Member) -> None:
        if member.bot:
            return
        guild, name = member.guild.id, member.display_name
        engine = self.services.engine
        async with engine.activity.working():
            stored = await store_welcome(
                self.services,
                tenant_key(guild),
                str(member.id),
                name,
                f"discord:join:{guild}:{member.id}",
                name,
                {"platform": PLATFORM, "guild_id": str(guild)},
            )
            if stored is not None:
                await engine.answer(*stored, DirectMessages(member, self.user))
