"""Where messages sent outside a live handler go: routed by the tenant's platform.

`Router` is the engine's `Platforms` port: it maps tenant-key prefixes (`discord:`,
`slack:`) to a platform's DM sender (openers: `router.direct(tenant, user)`) and reply route
(retried replies: `router.reply_route(tenant, user, meta)`, back where the member wrote). A
tenant with no configured platform (e.g. `local`, the terminal) raises `NoPlatform`: its
openers wait in the outbox and show the next time the member chats.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from bot.app import App
from core.errors import NoPlatform
from core.ports import Send

DmSender = Callable[[str, str, str], Awaitable[None]]  # (tenant, user, text): a platform's DM
ReplyRoute = Callable[[str, str, dict[str, Any]], Send]  # (tenant, user, event meta) -> send


class Router:
    """`core.ports.Platforms` over the configured platforms, chosen by tenant-key prefix."""

    def __init__(self) -> None:
        self.dms: dict[str, DmSender] = {}
        self.replies: dict[str, ReplyRoute] = {}

    def add(self, platform: str, dm: DmSender, reply: ReplyRoute) -> None:
        self.dms[platform] = dm
        self.replies[platform] = reply

    def reply_route(self, tenant: str, user: str, meta: dict[str, Any]) -> Send:
        reply = self.replies.get(tenant.split(":", 1)[0])
        if reply is None:
            raise NoPlatform(tenant)
        return reply(tenant, user, meta)

    def direct(self, tenant: str, user: str) -> Send:
        dm = self.dms.get(tenant.split(":", 1)[0])
        if dm is None:
            raise NoPlatform(tenant)

        async def send(text: str) -> None:
            await dm(tenant, user, text)

        return send


@asynccontextmanager
async def rest_router(app: App) -> AsyncIterator[Router]:
    """DM senders over the platforms' REST APIs only (no gateway, no socket): for `tick`."""
    settings = app.settings
    router = Router()
    async with AsyncExitStack() as stack:
        if settings.discord_token:
            import discord

            from adapters.discord import use_discord_hosts
            from adapters.discord.deliver import dm_sender as discord_dm
            from adapters.discord.deliver import reply_sender as discord_reply

            use_discord_hosts(settings.discord_api_url)
            client = discord.Client(intents=discord.Intents(guilds=True))  # REST only: no gateway
            await client.login(settings.discord_token)
            stack.push_async_callback(client.close)
            router.add("discord", discord_dm(client), discord_reply(client))
        if settings.slack:
            from slack_sdk.web.async_client import AsyncWebClient

            from adapters.slack.events import Clients, one_workspace
            from adapters.slack.events import dm_sender as slack_dm
            from adapters.slack.events import reply_sender as slack_reply

            clients: Clients
            if settings.slack_oauth:
                from bot.distribution import slack_distribution

                clients = slack_distribution(app).workspaces.client
            else:
                web = AsyncWebClient(
                    token=settings.slack_bot_token,
                    base_url=settings.slack_api_url or AsyncWebClient.BASE_URL,
                )
                clients = one_workspace(web)
            router.add("slack", slack_dm(clients), slack_reply(clients))
        yield router
