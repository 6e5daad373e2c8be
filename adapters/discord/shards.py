"""Discord past one gateway connection: shards, split across processes.

Discord splits a bot's servers into `count` shards: the events of server G go to shard
(G >> 22) % count, DMs to shard 0. `ShardedClient` is the same client on discord.py's
AutoShardedClient, running some shards (`ids`) or, with none given, all of the count Discord
recommends. Several processes with disjoint `ids` serve one bot between them:

    slash commands   synced by the process that runs shard 0 (they belong to the application,
                     not to a shard: once is enough)
    catch-up         each shard, on each new session (READY), reads back the channels of its
                     own servers; DMs: shard 0's
    DM homes         a first DM may belong to a server on another shard: the member's
                     communities in the database count too
    openers          any process: DMs go over REST, which needs no shard (posting.py)
    status           each shard's state apart (`on_shard_status`: /readyz lists them); the
                     client's own (`on_status`) says who the bot is once every shard is ready,
                     and stays: a shard that drops is that shard's `retrying`
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import discord

from adapters.common import Services
from adapters.discord.catchup import catch_up
from adapters.discord.client import CompanionClient
from adapters.discord.tenants import PLATFORM
from core.runtime.reconnect import when_back

ShardStatus = Callable[[int, str, str], None]  # (shard id, state, detail)
RECOUNT_SECONDS = (1, 2, 5, 10, 30)  # waits between asks for the recommended count


def _passing(error: discord.HTTPException) -> bool:
    """An answer worth waiting out: Discord's own outage (5xx) or its rate limit (429)."""
    return error.status >= 500 or error.status == 429


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

    async def served_to(self, user_id: int) -> list[str]:
        """This process sees only the servers of its shards that are ready (with `auto`
        too, while the later shards connect); the member's communities elsewhere are known
        from the database, so a first DM finds where they talked last."""
        here = await super().served_to(user_id)
        elsewhere = await self.services.members.dm_homes.communities(PLATFORM, str(user_id))
        return here + [tenant for tenant in elsewhere if tenant not in here]

    async def launch_shards(self) -> None:
        """`auto`: the count Discord recommends (GET /gateway/bot) is asked first, so that
        discord.py launches the shards as for a count given: at its DEFAULT_GATEWAY, which is
        DISCORD_GATEWAY_URL when set (else Discord's own), where it reconnects them later too.
        (Asked by discord.py itself, the count would come with Discord's gateway address.)"""
        if self.shard_count is None and not self.is_closed():
            self.shard_count = await self._recommended_count()
        for shard in self.shard_ids or range(self.shard_count or 0):
            self.on_shard_status(shard, "starting", "waiting for its turn to connect")
        await super().launch_shards()

    async def _recommended_count(self) -> int:
        """Asked until Discord answers: an outage of its API (5xx) or of the network is
        `retrying` with the reason, as a gateway connection that drops is; anything else
        (a refused token, say) is raised."""
        tries = 0
        while True:
            try:
                count, _, _ = await self.http.get_bot_gateway()
                return count
            except (OSError, aiohttp.ClientError, TimeoutError, discord.GatewayNotFound) as e:
                cause = e.__cause__ if isinstance(e, discord.GatewayNotFound) else e
                if isinstance(cause, discord.HTTPException) and not _passing(cause):
                    raise
                delay = RECOUNT_SECONDS[min(tries, len(RECOUNT_SECONDS) - 1)]
                why = f"{type(cause).__name__}: {cause}".strip(": ")
                detail = f"cannot ask Discord for the shard count ({why}); again in {delay} s"
                self.on_status("retrying", detail)
                tries += 1
                await asyncio.sleep(delay)

    def _servers_of(self, shard: int) -> int:
        return sum(1 for g in self.guilds if g.shard_id == shard)

    async def on_shard_connect(self, shard: int) -> None:
        self.on_shard_status(shard, "starting", "connected to the gateway; receiving servers")

    async def on_ready(self) -> None:  # every shard of this process is ready (again)
        self.announce()  # each read back its own servers as it became ready

    async def on_disconnect(self) -> None:  # a shard dropped: on_shard_disconnect says which
        pass

    async def on_resumed(self) -> None:  # on_shard_resumed
        pass

    async def on_shard_ready(self, shard: int) -> None:
        """A new session of `shard` (at start, or after Discord would not resume one): what
        its servers said meanwhile is read back, as the unsharded client does on READY."""
        self.on_shard_status(shard, "connected", f"ready with {self._servers_of(shard)} servers")
        engine = self.services.engine
        what = f"the Discord catch-up of shard {shard}"
        work = when_back(lambda: catch_up(OneShard(self, shard), engine), what)
        engine.activity.start(work, what)

    async def on_shard_disconnect(self, shard: int) -> None:
        if not self.is_closed():  # closing it (a clean stop) drops it too: no news
            self.on_shard_status(shard, "retrying", "the gateway connection dropped; reconnecting")

    async def on_shard_resumed(self, shard: int) -> None:
        self.on_shard_status(shard, "connected", "reconnected (session resumed)")


class OneShard:
    """The client as one shard's catch-up sees it (catchup.Reader): the servers of that
    shard, and the DMs when it is shard 0."""

    def __init__(self, client: ShardedClient, shard: int) -> None:
        self.client = client
        self.shard = shard

    @property
    def guilds(self) -> list[discord.Guild]:
        return [g for g in self.client.guilds if g.shard_id == self.shard]

    def get_channel(self, channel_id: int, /) -> Any:
        return self.client.get_channel(channel_id)

    async def fetch_channel(self, channel_id: int, /) -> Any:
        return await self.client.fetch_channel(channel_id)

    async def on_message(self, message: discord.Message, /) -> None:
        await self.client.on_message(message)

    def reads_back(self, guild_id: int | None, /) -> bool:
        if guild_id is None:
            return self.shard == 0  # DMs come to shard 0
        return shard_of(guild_id, self.client.shard_count or 1) == self.shard
