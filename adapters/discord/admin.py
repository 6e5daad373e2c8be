"""The `/admin` slash commands: a community's admins look after members and their companion.

    /admin export | reset <member>    a member's memory as a file, or erased (asks first)
    /admin welcome <enabled>, /admin web
    /admin companion [name] [instructions] [persona]
    /admin channel <channel> <mode>, /admin dms <enabled>, /admin block | unblock <member>
    /admin limits [messages] [member_tokens] [community_tokens] [member_dollars] [...]
    /admin welcome_text <text>

Admin = Manage Server as Discord computed it for this very interaction, or a configured admin
id: `interaction_check` checks it on every invocation (see `commands.is_admin`).
"""

from __future__ import annotations

import logging
from typing import Literal

import discord
from discord import app_commands

from adapters.common import (
    NOT_ADMIN,
    block_member,
    change_companion,
    companion_text,
    limits_text,
    place_channel,
    reach_text,
    set_limits,
    set_welcome_text,
)
from adapters.discord.commands import CommandState, Confirm, Someone, is_admin, say, send_export

log = logging.getLogger(__name__)
NICK_LIMIT = 32  # Discord's
NO_NICKNAME = (
    "\n(I could not change my nickname in this server to match: give me the Change "
    "Nickname permission, or change it in the server's member list.)"
)


async def _nickname(guild: discord.Guild, name: str) -> str:
    """The bot's nickname in this server follows the companion's name ("" if it did)."""
    try:
        await guild.me.edit(nick=name[:NICK_LIMIT] or None)
    except discord.HTTPException as error:
        log.warning("nickname in guild %s not changed: %s", guild.id, error)
        return NO_NICKNAME
    return ""


@app_commands.guild_only()
@app_commands.allowed_contexts(guilds=True, dms=False, private_channels=False)
class AdminCommands(
    app_commands.Group,
    name="admin",
    description="Community admins: members' memory and welcomes",
    default_permissions=discord.Permissions(manage_guild=True),
):
    def __init__(self, state: CommandState) -> None:
        super().__init__()
        self.state = state

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        """Every admin command: Manage Server here, or a configured admin id."""
        if is_admin(interaction, self.state.services.admin_ids):
            return True
        log.warning(
            "user %s is not an admin of guild %s", interaction.user.id, interaction.guild_id
        )
        await say(interaction, NOT_ADMIN)
        return False

    @app_commands.command(description="Send yourself a member's whole memory as a JSON file")
    @app_commands.describe(member="Whose memory")
    async def export(self, interaction: discord.Interaction, member: Someone) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        await interaction.response.defer(ephemeral=True, thinking=True)
        actor = str(interaction.user.id)
        doc = await services.members.admin_export(tenant, actor, str(member.id))
        if doc is None:
            await say(interaction, f"I have no memory of {member.display_name}.")
            return
        await send_export(interaction, doc, f"memory-{member.id}.json")

    @app_commands.command(description="Erase a member's whole memory, for good")
    @app_commands.describe(member="Whose memory")
    async def reset(self, interaction: discord.Interaction, member: Someone) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        name = member.display_name

        async def erase(click: discord.Interaction) -> str:
            if not is_admin(click, services.admin_ids):  # rights may have changed meanwhile
                return NOT_ADMIN
            found = await services.members.admin_reset(tenant, str(click.user.id), str(member.id))
            return f"Done: {name}'s memory is erased." if found else f"I had no memory of {name}."

        ask = f"This erases everything I remember about {name}, for good. Are you sure?"
        await say(interaction, ask, view=Confirm(interaction, "Erase", erase))

    @app_commands.command(description="Whether new members get a welcome by DM")
    @app_commands.describe(enabled="True: new members get a welcome; False: they don't")
    async def welcome(self, interaction: discord.Interaction, enabled: bool) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        await services.members.tenant_settings(
            tenant, actor=str(interaction.user.id), welcome=enabled
        )
        state = "now get a welcome by DM" if enabled else "no longer get a welcome"
        await say(interaction, f"New members {state}.")

    @app_commands.command(description="Your companion's name, instructions and persona")
    @app_commands.describe(
        name="What members call it (- for none)",
        instructions="Tone, rules, topics to avoid, what this server is about (- for none)",
        persona="Who new members' companions start as (- for the built-in one)",
    )
    async def companion(
        self,
        interaction: discord.Interaction,
        name: app_commands.Range[str, 1, 100] | None = None,
        instructions: app_commands.Range[str, 1, 6000] | None = None,
        persona: app_commands.Range[str, 1, 6000] | None = None,
    ) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        given = {"name": name, "instructions": instructions, "persona": persona}
        changes = {field: value for field, value in given.items() if value is not None}
        if not changes:
            await say(interaction, await companion_text(services.members, tenant))
            return
        actor = str(interaction.user.id)
        profile, said = await change_companion(services.members, tenant, actor, changes)
        if profile is not None and name is not None and interaction.guild is not None:
            said += await _nickname(interaction.guild, profile.name)
        await say(interaction, said)

    @app_commands.command(description="Where I answer: set one channel's place")
    @app_commands.describe(
        channel="The channel",
        mode="answer: one of the only channels I answer in; never; open: every message there "
        "is for me; default: none of these",
    )
    async def channel(
        self,
        interaction: discord.Interaction,
        channel: app_commands.AppCommandChannel,
        mode: Literal["answer", "never", "open", "default"],
    ) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        actor, name = str(interaction.user.id), f"#{channel.name}"
        said = await place_channel(services.members, tenant, actor, str(channel.id), name, mode)
        await say(interaction, said)

    @app_commands.command(description="Whether members may talk to me by direct message")
    @app_commands.describe(enabled="True: DMs are answered; False: they are not")
    async def dms(self, interaction: discord.Interaction, enabled: bool) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        reach = await services.members.admission.change_reach(
            tenant, str(interaction.user.id), dms=enabled
        )
        await say(interaction, reach_text(reach))

    @app_commands.command(description="Stop answering a member (their memory is kept)")
    @app_commands.describe(member="Whom")
    async def block(self, interaction: discord.Interaction, member: Someone) -> None:
        await self._block(interaction, member, True)

    @app_commands.command(description="Answer a blocked member again")
    @app_commands.describe(member="Whom")
    async def unblock(self, interaction: discord.Interaction, member: Someone) -> None:
        await self._block(interaction, member, False)

    async def _block(self, interaction: discord.Interaction, member: Someone, on: bool) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        said = await block_member(
            services.members,
            tenant,
            str(interaction.user.id),
            str(member.id),
            member.display_name,
            on,
        )
        await say(interaction, said)

    @app_commands.command(description="This server's own limits (none given: shows them)")
    @app_commands.describe(
        messages="Messages one member may send per the operator's window (- for none)",
        member_tokens="Model tokens one member may use per UTC day (- for none)",
        community_tokens="Model tokens the server may use per UTC day (- for none)",
        member_dollars="Dollars one member may spend per UTC day (- for none)",
        community_dollars="Dollars the server may spend per UTC day (- for none)",
    )
    async def limits(
        self,
        interaction: discord.Interaction,
        messages: str | None = None,
        member_tokens: str | None = None,
        community_tokens: str | None = None,
        member_dollars: str | None = None,
        community_dollars: str | None = None,
    ) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        given = {
            "messages": messages,
            "member_tokens": member_tokens,
            "community_tokens": community_tokens,
            "member_dollars": member_dollars,
            "community_dollars": community_dollars,
        }
        changes = {name: value for name, value in given.items() if value is not None}
        if not changes:
            await say(interaction, await limits_text(services.community, tenant))
            return
        actor = str(interaction.user.id)
        await say(interaction, await set_limits(services.community, tenant, actor, changes))

    @app_commands.command(description="What every welcome should say (- for nothing)")
    @app_commands.describe(text="e.g. the channels to start in; the companion says it its way")
    async def welcome_text(
        self, interaction: discord.Interaction, text: app_commands.Range[str, 1, 1000]
    ) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        actor = str(interaction.user.id)
        await say(interaction, await set_welcome_text(services.members, tenant, actor, text))

    @app_commands.command(description="A private link to members, memory, usage and settings")
    async def web(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        link = await services.web_link(tenant, str(interaction.user.id), admin=True)
        await say(interaction, link)
