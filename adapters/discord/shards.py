"""Discord past one gateway connection: shards, split across processes.

Discord splits a bot's servers into `count` shards: the events of server G go to shard
(G >> 22) % count, DMs to shard 0. `ShardedClient` is the same client on discord.py's
AutoShardedClient, running some shards (`ids`) or, with none given, all of the count Discord
recommends. Several processes with disjoint `ids` serve one bot between them:

    slash commands   synced by the process that runs shard 0 (they belong to the application,
                     not to a shard: once is enough)
    catch-up         each process reads back the channels of its own servers; DMs: shard 0's
    DM homes         a first DM may belong to a server on another shard: the member's
                     communities in the database count too
    openers          any process: DMs go over REST, which needs no shard (deliver.py)
    status           each shard's state apart (`on_shard_status`: /readyz lists them)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import discord

from adapters.common import Services
from adapters.discord.client import CompanionClient

ShardStatus = Callable[[int, str, str], None]  # (shard id, state, detail)


def shard_of(guild_id: int, count: int) -> int:
    """The shard Discord sends a server's events to."""
    return (guild_id >> 22) % count


class ShardedClient(CompanionClient, discord.AutoShardedClient):
    def __init__(
        self,
        services: Services,
        *,
        ids: Sequence[int] | None,
        count: int | None,
        on_shard_status: ShardStatus | None = None,
        **options: Any,
    ) -> None:
        if ids is not None:
            options.update(shard_ids=list(ids), shard_count=count)
        super().__init__(services, **options)
        self.on_shard_status = on_shard_status or (lambda shard, state, detail: None)

    @property
    def syncs_commands(self) -> bool:
        return self.shard_ids is None or 0 in self.shard_ids

    def serves(self, shard: int) -> bool:
        return self.shard_ids is None or shard in self.shard_ids

    def reads_back(self, guild_id: int | None) -> bool:
        if guild_id is None:
            return self.serves(0)  # DMs come to shard 0
        return self.shard_count is None or self.serves(shard_of(guild_id, self.shard_count))

    async def served_to(self, user_id: int) -> list[str]:
        """This process sees only its shards' servers; the member's communities on other
        shards are known from the database, so a first DM finds where they talked last."""
        here = await super().served_to(user_id)
        if self.shard_ids is None:
            return here
        elsewhere = await self.services.members.dm_homes.communities("discord", str(user_id))
        return here + [tenant for tenant in elsewhere if tenant not in here]

    async def launch_shards(self) -> None:
        """`auto`: the count Discord recommends (GET /gateway/bot) is asked first, so that
        discord.py launches the shards as for a count given: at its DEFAULT_GATEWAY, which is
        DISCORD_GATEWAY_URL when set (else Discord's own), where it reconnects them later too.
        (Asked by discord.py itself, the count would come with Discord's gateway address.)"""
        if self.shard_count is None and not self.is_closed():
            self.shard_count, _, _ = await self.http.get_bot_gateway()
        for shard in self.shard_ids or range(self.shard_count or 0):
            self.on_shard_status(shard, "starting", "waiting for its turn to connect")
        await super().launch_shards()

    def _servers_of(self, shard: int) -> int:
        return sum(1 for g in self.guilds if g.shard_id == shard)

    async def on_shard_connect(self, shard: int) -> None:
        self.on_shard_status(shard, "starting", "connected to the gateway; receiving servers")

    async def on_shard_ready(self, shard: int) -> None:
        self.on_shard_status(shard, "connected", f"ready with {self._servers_of(shard)} servers")

    async def on_shard_disconnect(self, shard: int) -> None:
        self.on_shard_status(shard, "retrying", "the gateway connection dropped; reconnecting")

    async def on_shard_resumed(self, shard: int) -> None:
        self.on_shard_status(shard, "connected", "reconnected (session resumed)")
