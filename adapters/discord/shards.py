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
    IDENTIFY pace    Discord takes `max_concurrency` IDENTIFYs per 5 s (GET /gateway/bot:
                     1 for most bots, 16 and more for large ones), one per bucket (shard id %
                     max_concurrency): a shard waits only for its own bucket, so a large
                     bot's shards connect side by side (discord.py waits 5 s before each)
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
IDENTIFY_SECONDS = 5.0  # Discord's window for `max_concurrency` IDENTIFYs (one per bucket)
LIMITS_SECONDS = 10.0  # the most a start with a given shard range waits for max_concurrency


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
        self.identify_seconds = IDENTIFY_SECONDS
        self.max_concurrency = 1  # until GET /gateway/bot says (launch_shards)
        self._identified: dict[int, float] = {}  # bucket -> loop time of its last IDENTIFY
        self._buckets: dict[int, asyncio.Lock] = {}

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
            self.shard_count, self.max_concurrency = await self._recommended_count()
        elif not self.is_closed():
            self.max_concurrency = await self._concurrency()
        for shard in self.shard_ids or range(self.shard_count or 0):
            self.on_shard_status(shard, "starting", "waiting for its turn to connect")
        await super().launch_shards()

    async def _recommended_count(self) -> tuple[int, int]:
        """The count and max_concurrency, asked until Discord answers: an outage of its API
        (5xx) or of the network is `retrying` with the reason, as a gateway connection that
        drops is; anything else (a refused token, say) is raised."""
        tries = 0
        while True:
            try:
                count, _, limits = await self.http.get_bot_gateway()
                return count, _concurrency_of(limits)
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

    async def _concurrency(self) -> int:
        """max_concurrency for a given shard range: asked once; when Discord does not say
        (its API down or slow), 1, the pace every bot may keep."""
        try:
            async with asyncio.timeout(LIMITS_SECONDS):
                _, _, limits = await self.http.get_bot_gateway()
        except (OSError, aiohttp.ClientError, TimeoutError, discord.DiscordException):
            return 1
        return _concurrency_of(limits)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Before each IDENTIFY (a start or a new session): wait until 5 s after the last
        IDENTIFY of this shard's bucket, if that was less than 5 s ago. The first of each
        bucket, and a shard that starts over long after, go at once. (As with discord.py's
        own wait, other processes' IDENTIFYs are not known here.)"""
        bucket = (shard_id or 0) % self.max_concurrency
        async with self._buckets.setdefault(bucket, asyncio.Lock()):
            loop = asyncio.get_running_loop()
            last = self._identified.get(bucket)
            if last is not None:
                await asyncio.sleep(max(0.0, last + self.identify_seconds - loop.time()))
            self._identified[bucket] = loop.time()

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
        work = when_back(lambda: catch_up(OneShard(self, shard), engine, self.unstored), what)
        engine.activity.start(work, what)

    async def on_shard_disconnect(self, shard: int) -> None:
        if not self.is_closed():  # closing it (a clean stop) drops it too: no news
            self.on_shard_status(shard, "retrying", "the gateway connection dropped; reconnecting")

    async def on_shard_resumed(self, shard: int) -> None:
        self.on_shard_status(shard, "connected", "reconnected (session resumed)")


def _concurrency_of(limits: Any) -> int:
    """session_start_limit.max_concurrency of GET /gateway/bot (at least 1)."""
    try:
        return max(1, int(limits["max_concurrency"]))
    except (TypeError, KeyError, ValueError):
        return 1


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
