"""Discord: a discord.py client whose handlers turn gateway events into engine events.

    client.py     the client: intents, DMs / mentions / replies, member joins, tenant lookup
    messages.py   one message into the author's events (files, then text); replies back
    commands.py   slash commands: /memory, /openers, /quiet-hours, /timezone, /admin
    shards.py     the same client over several gateway shards, a slice per process

The composition root builds the client with `build_discord_client` and runs it with
`run_discord`. `api_url` (DISCORD_API_URL) and `gateway_url` (DISCORD_GATEWAY_URL) point
discord.py at another REST API and gateway, e.g. a local fake in tests or a proxy.
"""

from __future__ import annotations

import discord
import yarl

from adapters.common import Services
from adapters.discord.client import CompanionClient, Status
from adapters.discord.shards import ShardedClient, ShardStatus
from adapters.discord.unstored import Unstored

__all__ = ["CompanionClient", "build_discord_client", "run_discord", "use_discord_hosts"]


def use_discord_hosts(api_url: str | None = None, gateway_url: str | None = None) -> None:
    """Point discord.py at another REST base and gateway (DISCORD_API_URL/_GATEWAY_URL).

    Both are class-level in discord.py: they apply to every client in this process.
    """
    if api_url:
        discord.http.Route.BASE = api_url.rstrip("/")
    if gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)


def build_discord_client(
    services: Services,
    *,
    home_guild_id: int | None = None,
    api_url: str | None = None,
    gateway_url: str | None = None,
    on_status: Status | None = None,
    sharded: bool = False,
    shard_ids: tuple[int, ...] | None = None,
    shard_count: int | None = None,
    on_shard_status: ShardStatus | None = None,
    unstored: Unstored | None = None,
) -> discord.Client:
    """The client; `home_guild_id` is the default DM home (see client.py); `on_status` hears
    (state, detail) as the gateway connects, drops and resumes. `sharded`: shards
    `shard_ids` of `shard_count` (both None: all the shards Discord recommends), each
    shard's state to `on_shard_status`. `unstored`: where messages that wait for the
    database are noted (unstored.py)."""
    use_discord_hosts(api_url, gateway_url)
    if sharded:
        return ShardedClient(
            services,
            ids=shard_ids,
            count=shard_count,
            on_shard_status=on_shard_status,
            home_guild_id=home_guild_id,
            on_status=on_status,
            unstored=unstored,
        )
    return CompanionClient(
        services, home_guild_id=home_guild_id, on_status=on_status, unstored=unstored
    )


async def run_discord(client: discord.Client, token: str) -> None:
    """Log in, connect and serve until the client is closed; closes it on the way out."""
    async with client:
        await client.start(token)
