"""Slash commands: members manage their own memory, admins anyone's.

    /memory show | export | forget | web    the member's own working context, file, erasure,
                                            a private sign-in link to the memory inspector
    /openers on|off, /quiet-hours, /timezone      the member's opener settings
    /admin ...                              admins only: adapters/discord/admin.py
                                            (the tree of them all: adapters/discord/tree.py)

Every answer is ephemeral. Erasing asks first with a button that only the asker may press.
Admin = Manage Server as Discord computed it for this very interaction (the member's resolved
permissions), or a configured admin id; the admin group's `interaction_check` checks it on
every invocation, and the confirming click checks it again. `default_permissions` merely
hides the group from others.

The commands get what they need (`CommandState`: the services and the tenant of a server)
when they are built, as cogs do; they never reach back into the client.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal
from zoneinfo import available_timezones

import discord
from discord import app_commands

from adapters.common import (
    FORGET_ASK,
    FORGET_DONE,
    NOTHING_YET,
    SORRY,
    Services,
    export_bytes,
    memory_text,
)
from adapters.discord.posting import DISCORD_LIMIT
from adapters.discord.tenants import PLATFORM, guild_of
from adapters.text import split_message
from core.errors import BadSetting

log = logging.getLogger(__name__)

NOT_YOURS = "That button belongs to someone else."
DM_HOME = (
    "\n\nOur direct messages use what I remember of you in **{server}**. To use another "
    "server's memory instead, run `/memory home` there."
)
HOME_SET = (
    "Done: our direct messages now use what I remember of you here, in **{server}**. "
    "The memory of other servers stays where it is."
)
CANCELLED = "Cancelled: nothing was erased."
LAPSED = "No answer, so nothing was erased."
TOO_BIG = "That memory is too large to send here; ask the operator to run `companion export`."
Action = Callable[[discord.Interaction], Awaitable[str]]
Someone = discord.Member | discord.User  # a member who left can still be exported or reset


def is_admin(interaction: discord.Interaction, admin_ids: frozenset[str]) -> bool:
    """Manage Server (or Administrator) in this server, or a configured admin id."""
    if str(interaction.user.id) in admin_ids:
        return True
    if interaction.guild_id is None or not isinstance(interaction.user, discord.Member):
        return False
    permissions = interaction.permissions  # computed by Discord for this interaction
    return permissions.manage_guild or permissions.administrator


def admin_rights(client: discord.Client, admin_ids: frozenset[str]) -> Any:
    """The inspector's re-check of an admin session: (tenant, user) -> Manage Server (or
    Administrator) in that server now, from the gateway's cache or else REST; None when
    this client does not see the server or Discord cannot say."""

    async def check(tenant: str, user: str) -> bool | None:
        if user in admin_ids:
            return True
        guild_id = guild_of(tenant)
        guild = client.get_guild(guild_id) if guild_id is not None else None
        if guild is None or not user.isdigit():
            return None
        member = guild.get_member(int(user))
        if member is None:
            try:
                member = await guild.fetch_member(int(user))
            except discord.NotFound:
                return False  # no longer in the server
            except discord.HTTPException:
                return None
        permissions = member.guild_permissions
        return permissions.manage_guild or permissions.administrator

    return check


@dataclass(frozen=True)
class CommandState:
    """What the commands need from the composition root, handed in when they are built."""

    services: Services
    tenant_of: Callable[..., Awaitable[str]]  # (server or None, user, keep=) -> tenant
    server_name: Callable[[str], str]  # a tenant as its members know it

    async def tenant(self, interaction: discord.Interaction) -> str:
        return await self.tenant_of(interaction.guild_id, interaction.user.id, keep=False)


async def say(interaction: discord.Interaction, text: str, **extra: Any) -> None:
    """An ephemeral answer in parts of at most 2000 characters."""
    parts = split_message(text, DISCORD_LIMIT) or [text]
    for i, part in enumerate(parts):
        last = {**extra} if i == len(parts) - 1 else {}
        if interaction.response.is_done():
            await interaction.followup.send(part, ephemeral=True, **last)
        else:
            await interaction.response.send_message(part, ephemeral=True, **last)


async def send_export(interaction: discord.Interaction, doc: dict[str, Any], name: str) -> None:
    data = export_bytes(doc)
    if len(data) > interaction.filesize_limit:
        data, name = gzip.compress(data), f"{name}.gz"
    if len(data) > interaction.filesize_limit:
        await say(interaction, TOO_BIG)
        return
    file = discord.File(io.BytesIO(data), filename=name)
    await interaction.followup.send(f"Here it is: `{name}`.", file=file, ephemeral=True)


class Confirm(discord.ui.View):
    """Erase or cancel; only the person who asked may press, and the action says what it did."""

    WAIT = 300.0  # seconds until the question lapses and nothing happens

    def __init__(self, asked: discord.Interaction, label: str, action: Action) -> None:
        super().__init__(timeout=self.WAIT)
        self.asked = asked
        self.action = action
        self.confirm.label = label

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.user.id == self.asked.user.id:
            return True
        await interaction.response.send_message(NOT_YOURS, ephemeral=True)
        return False

    @discord.ui.button(label="Erase", style=discord.ButtonStyle.danger)
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.stop()
        await interaction.response.defer()
        text = await self.action(interaction)
        await interaction.edit_original_response(content=text, view=None)

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)

    async def on_timeout(self) -> None:
        with contextlib.suppress(discord.HTTPException):
            await self.asked.edit_original_response(content=LAPSED, view=None)

    async def on_error(
        self, interaction: discord.Interaction, error: Exception, item: discord.ui.Item[Any]
    ) -> None:
        log.error("confirmation by %s failed", interaction.user.id, exc_info=error)
        with contextlib.suppress(discord.HTTPException):
            await say(interaction, SORRY)


class MemoryCommands(app_commands.Group, name="memory", description="What I remember about you"):
    def __init__(self, state: CommandState) -> None:
        super().__init__()
        self.state = state

    @app_commands.command(description="Show what I remember about you")
    async def show(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        view = await services.members.view(tenant, str(interaction.user.id))
        where = DM_HOME.format(server=self.state.server_name(tenant))
        await say(interaction, memory_text(view) + ("" if interaction.guild_id else where))

    @app_commands.command(description="Use this server's memory of you in our direct messages")
    @app_commands.guild_only()
    async def home(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        await services.members.dm_homes.choose(PLATFORM, str(interaction.user.id), tenant)
        await say(interaction, HOME_SET.format(server=self.state.server_name(tenant)))

    @app_commands.command(description="Send you everything I remember about you, as a JSON file")
    async def export(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        await interaction.response.defer(ephemeral=True, thinking=True)
        doc = await services.members.export(tenant, str(interaction.user.id))
        if doc is None:
            await say(interaction, NOTHING_YET)
            return
        await send_export(interaction, doc, f"memory-{interaction.user.id}.json")

    @app_commands.command(description="Erase everything I remember about you, for good")
    async def forget(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        user = str(interaction.user.id)

        async def erase(click: discord.Interaction) -> str:
            return FORGET_DONE if await services.members.forget(tenant, user) else NOTHING_YET

        await say(interaction, FORGET_ASK, view=Confirm(interaction, "Erase", erase))

    @app_commands.command(description="A private link to see and correct your memory in a browser")
    async def web(self, interaction: discord.Interaction) -> None:
        services, tenant = self.state.services, await self.state.tenant(interaction)
        await say(interaction, await services.web_link(tenant, str(interaction.user.id)))


def setting_commands(state: CommandState) -> list[app_commands.Command[Any, Any, None]]:
    """/openers, /quiet-hours and /timezone: the member's own opener settings."""

    async def change(interaction: discord.Interaction, **change: Any) -> dict[str, Any] | None:
        user = str(interaction.user.id)
        try:
            return await state.services.members.settings(
                await state.tenant(interaction), user, **change
            )
        except BadSetting as error:
            await say(interaction, f"That didn't work: {error}.")
            return None

    @app_commands.describe(setting="on: I may write to you first now and then; off: I only answer")
    async def openers(interaction: discord.Interaction, setting: Literal["on", "off"]) -> None:
        if setting not in ("on", "off"):  # Discord sends only the choices; a stale client may not
            await say(interaction, "That didn't work: openers are `on` or `off`.")
            return
        if await change(interaction, openers=setting == "on") is not None:
            what = "I may start a conversation now and then" if setting == "on" else "I only answer"
            await say(interaction, f"Openers {setting}: {what}.")

    @app_commands.describe(hours="For example 22:00-09:00, in your time zone")
    async def quiet_hours(interaction: discord.Interaction, hours: str) -> None:
        saved = await change(interaction, quiet_hours=hours)
        if saved is not None:
            span, zone = saved["quiet_hours"], saved["timezone"]
            await say(
                interaction, f"Quiet hours {span} ({zone}): I won't start conversations then."
            )

    @app_commands.describe(zone="For example Europe/Berlin")
    @app_commands.autocomplete(zone=_zone_choices)
    async def timezone(interaction: discord.Interaction, zone: str) -> None:
        saved = await change(interaction, timezone=zone)
        if saved is not None:
            await say(interaction, f"Your time zone is now {saved['timezone']}.")

    return [
        app_commands.Command(name=name, description=description, callback=callback)
        for name, callback, description in (
            ("openers", openers, "Whether I may start conversations with you"),
            ("quiet-hours", quiet_hours, "Hours when I never start a conversation"),
            ("timezone", timezone, "Your time zone, for quiet hours"),
        )
    ]


@cache
def _zones() -> list[str]:
    return sorted(available_timezones())


async def _zone_choices(
    interaction: discord.Interaction, current: str
) -> list[app_commands.Choice[str]]:
    needle = current.strip().lower().replace(" ", "_")
    names = [name for name in _zones() if needle in name.lower()][:25]
    return [app_commands.Choice(name=name, value=name) for name in names]
