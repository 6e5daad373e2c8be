"""The command tree of one Discord client: every slash command, and their one error handler."""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from adapters.common import SORRY
from adapters.discord.admin import AdminCommands
from adapters.discord.commands import CommandState, MemoryCommands, say, setting_commands

log = logging.getLogger(__name__)


class CompanionTree(app_commands.CommandTree):
    async def on_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        if isinstance(error, app_commands.CheckFailure):
            return  # the check answered already (e.g. "Only community admins can do that.")
        name = interaction.command.qualified_name if interaction.command else "?"
        log.error("/%s by %s failed", name, interaction.user.id, exc_info=error)
        try:
            await say(interaction, SORRY)
        except discord.HTTPException:
            log.warning("could not apologise for /%s", name)


def add_commands(tree: app_commands.CommandTree, state: CommandState) -> None:
    """A fresh set of commands for this tree (no command object is shared between clients)."""
    tree.add_command(MemoryCommands(state))
    tree.add_command(AdminCommands(state))
    for command in setting_commands(state):
        tree.add_command(command)
