"""The platforms `companion run` serves, each entered as a context manager.

    slack_running     Bolt app: Socket Mode (SLACK_APP_TOKEN) or HTTP mode on the shared server;
                      with SLACK_CLIENT_ID, any workspace (HTTP mode and the install pages)
    discord_running   discord.py client over the gateway

Credentials are checked first, once: a refused token stops the start with one line that
says what to fix (exit status 2). What the gateway refuses later (Discord's intents, a shard
count: close codes 4014, 4011, 4010) is `refused`, in one line that says what to change, and
not tried again. A platform that cannot be reached is not fatal: the rest
of the process serves (health, the other platform), the platform is `retrying` in /readyz
and tries again with backoff, and SIGTERM stops it at any point. Every change of state is
one log line (bot.health.Health.report), the first one naming who the bot is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import aiohttp

from adapters.common import Services
from bot.app import App
from bot.distribution import slack_distribution
from bot.health import Health
from bot.rights import PlatformRights
from bot.settings import DiscordShards
from core.errors import ConfigError
from core.stopping import cancel_within, stop_within

log = logging.getLogger(__name__)
FIRST_TRY_SECONDS = 15  # the check at start; after it, retries go on in the background
RETRY_SECONDS = (2, 5, 10, 30, 60)
UNREACHABLE = (aiohttp.ClientError, OSError, TimeoutError)


def _why(error: BaseException) -> str:
    words = str(error).strip().splitlines()
    return f"{type(error).__name__}: {words[0] if words else 'no details'}"


async def _retrying(
    attempt: Callable[[], Awaitable[Any]],
    report: Callable[[str, str], None],
    what: str,
    transient: tuple[type[BaseException], ...],
) -> Any:
    """Call `attempt` until it works, reporting each failure; cancelled by SIGTERM."""
    tries = 0
    while True:
        try:
            async with asyncio.timeout(FIRST_TRY_SECONDS * 2):
                return await attempt()
        except transient as error:
            delay = RETRY_SECONDS[min(tries, len(RETRY_SECONDS) - 1)]
            report("retrying", f"cannot reach {what} ({_why(error)}); trying again in {delay} s")
            tries += 1
            await asyncio.sleep(delay)


def _watch(task: asyncio.Task[Any], report: Callable[[str, str], None], name: str) -> None:
    """A background connection that ended by itself is a refusal the operator must see."""

    def done(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, ConfigError):
            report("refused", str(error))
        elif error is not None:
            report("refused", f"{name} stopped: {_why(error)}")

    task.add_done_callback(done)


async def _connect(
    attempt: Callable[[], Awaitable[str]],
    report: Callable[[str, str], None],
    what: str,
    transient: tuple[type[BaseException], ...],
    state: str = "connected",
) -> asyncio.Task[Any] | None:
    """Try once now: a refusal (ConfigError) stops the start. Unreachable: keep trying in
    the background (the task returned), the process serving meanwhile. Once `attempt`
    works the platform is in `state` (`starting` when it has a further step to go)."""
    try:
        async with asyncio.timeout(FIRST_TRY_SECONDS):
            report(state, await attempt())
        return None
    except transient as error:
        report("retrying", f"cannot reach {what} ({_why(error)}); trying again")

    async def again() -> None:
        report(state, await _retrying(attempt, report, what, transient))

    task = asyncio.create_task(again())
    _watch(task, report, what)
    return task


async def _stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel a platform's background task; it gets STOP_SECONDS to end."""
    if task is not None:
        await cancel_within("a platform's background task", [task])


# --- Slack -----------------------------------------------------------------------------------


async def watch_socket_mode(
    client: Any,
    identity: Callable[[], Awaitable[str]],
    report: Callable[[str, str], None],
    every: float = 5.0,
) -> None:
    """The Socket Mode client reconnects by itself: say when it is away, and when back (only
    on a change: Slack is not asked who we are every few seconds)."""
    connected = True
    while True:
        await asyncio.sleep(every)
        now = await client.is_connected()
        if now == connected:
            continue
        connected = now
        if now:
            report("connected", await identity())
        else:
            report("retrying", "the Socket Mode connection dropped; reconnecting")


async def _slack_identity(client: Any, where: str) -> str:
    """Who the bot is in which workspace (auth.test); a refused token is a ConfigError."""
    from slack_sdk.errors import SlackApiError

    try:
        answer = await client.auth_test()
    except SlackApiError as error:
        raise ConfigError(
            f"Slack: SLACK_BOT_TOKEN was refused ({error.response.get('error')}); copy the Bot "
            "User OAuth Token (xoxb-…) from your app's OAuth & Permissions page"
        ) from None
    return (
        f"connected as @{answer.get('user')} ({answer.get('user_id')}) in workspace "
        f"{answer.get('team')} ({answer.get('team_id')}), {where}"
    )


@asynccontextmanager
async def slack_running(
    app: App,
    services: Services,
    health: Health,
    serve_http: Callable[[Any], Any],
    connections: aiohttp.ClientSession | None = None,
    rights: PlatformRights | None = None,
) -> AsyncIterator[None]:
    """Slack, until the block ends. `serve_http(bolt_app)` serves HTTP mode's events; Web API
    calls go over `connections` (kept alive; the caller closes them after the last reply)."""
    from adapters.slack import build_slack_app
    from adapters.slack.commands import admin_rights
    from adapters.slack.events import PLATFORM, finish_held, one_workspace
    from adapters.slack.posting import SlackOutlets

    settings = app.settings
    oauth = slack_distribution(app) if settings.slack_oauth else None
    slack = build_slack_app(
        services,
        settings.slack_bot_token,
        settings.slack_signing_secret,
        settings.slack_api_url,
        connections,
        oauth,
    )
    clients = oauth.workspaces.client if oauth else one_workspace(slack.client)
    app.platforms.add(PLATFORM, SlackOutlets(clients))  # openers and retried replies
    if rights is not None:  # the inspector asks Slack whether an admin still is one
        rights.add(PLATFORM, admin_rights(services, clients))

    def report(state: str, detail: str) -> None:
        health.report("Slack", state, detail)

    api = settings.slack_api_url or "https://slack.com/api/"
    work = finish_held(services, clients)
    app.engine.activity.start(work, "Slack: messages held for their files")
    if settings.slack_app_token:
        report("starting", f"connecting to {api} in Socket Mode")
        async with _socket_mode(slack, settings.slack_app_token, report):
            yield
        return
    events = f"events at http://{settings.http_host}:{settings.http_port}/slack/events"
    if oauth:  # no token of its own to check: each workspace's comes with its installation
        resealed = await oauth.installations.reseal()  # after a rotation, or first sealing
        if resealed:
            log.info("Slack: sealed %d stored tokens with the current key", resealed)
        installed = await oauth.installations.count()
        report(
            "connected",
            f"any workspace, {installed} installed so far; install at "
            f"{settings.base_url}/slack/install, {events}",
        )
        async with serve_http(slack):
            yield
        return
    report("starting", f"checking SLACK_BOT_TOKEN at {api}")

    async def identity() -> str:
        return await _slack_identity(slack.client, f"HTTP mode, {events}")

    task = await _connect(identity, report, f"Slack at {api}", UNREACHABLE)
    try:
        async with serve_http(slack):
            yield
    finally:
        await _stop(task)


@asynccontextmanager
async def _socket_mode(
    slack: Any, app_token: str, report: Callable[[str, str], None]
) -> AsyncIterator[None]:
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
    from slack_sdk.errors import SlackApiError

    handler = AsyncSocketModeHandler(slack, app_token)

    async def connect() -> str:
        who = await _slack_identity(slack.client, "Socket Mode")
        try:
            await handler.connect_async()
        except SlackApiError as error:
            raise ConfigError(
                f"Slack: SLACK_APP_TOKEN was refused ({error.response.get('error')}); create an "
                "app-level token with connections:write on your app's Basic Information page"
            ) from None
        return who

    task = await _connect(connect, report, "Slack", UNREACHABLE)
    identity = partial(_slack_identity, slack.client, "Socket Mode")
    watching = asyncio.create_task(watch_socket_mode(handler.client, identity, report))
    try:
        yield
    finally:
        await _stop(watching)
        await _stop(task)
        with suppress(Exception):
            async with asyncio.timeout(5):
                await handler.close_async()


# --- Discord ---------------------------------------------------------------------------------

DISCORD_REFUSED = (
    "Discord: DISCORD_TOKEN was refused (HTTP 401); reset the token under Bot in the Discord "
    "Developer Portal and set the new one"
)
INTENTS_REFUSED = (
    "Discord: the gateway refused the bot's intents; turn on Message Content Intent and "
    "Server Members Intent under Bot in the Discord Developer Portal"
)

SHARDS_REFUSED = (4010, 4011)  # the gateway's close codes: invalid shard, sharding required


def shards_refused(code: int, shards: DiscordShards | None, count: int | None) -> str:
    """What to change when the gateway turns down the shards (`count`: those identified)."""
    if code == 4010:
        return (
            f"Discord: the gateway refused shard {shards or 'settings'} (4010: invalid shard); "
            "COMPANION_DISCORD_SHARDS must give every process the same COUNT, ids below it"
        )
    if shards is None:
        return (
            "Discord: the gateway requires sharding (4011: too many servers for one "
            "connection); set COMPANION_DISCORD_SHARDS=auto, or IDS/COUNT to split the shards "
            "across processes (deploy/discord-setup.md, section 7)"
        )
    if shards.ids is None:
        return (
            f"Discord: the gateway requires more than the {count} shards it recommended "
            "(4011: sharding required); start again to ask for the count anew"
        )
    return (
        f"Discord: the gateway requires more shards (4011: a COUNT of {shards.count} is too "
        "small for this bot's servers); raise COUNT in COMPANION_DISCORD_SHARDS for every "
        "process, or use auto"
    )


@asynccontextmanager
async def discord_running(
    app: App,
    services: Services,
    health: Health,
    rights: PlatformRights | None = None,
) -> AsyncIterator[None]:
    import discord

    from adapters.discord import build_discord_client
    from adapters.discord.commands import admin_rights
    from adapters.discord.posting import DiscordOutlets
    from adapters.discord.tenants import PLATFORM
    from adapters.discord.unstored import Unstored

    settings = app.settings
    token = settings.discord_token
    assert token

    def report(state: str, detail: str) -> None:
        health.report("Discord", state, detail)

    shards = settings.discord_shards

    def report_shard(shard: int, state: str, detail: str) -> None:
        count = getattr(client, "shard_count", None) or "?"
        health.report(f"Discord shard {shard}/{count}", state, detail)

    client = build_discord_client(
        services,
        home_guild_id=settings.discord_home_guild,
        api_url=settings.discord_api_url,
        gateway_url=settings.discord_gateway_url,
        on_status=report,
        sharded=shards is not None,
        shard_ids=shards.ids if shards else None,
        shard_count=shards.count if shards else None,
        on_shard_status=report_shard,
        unstored=Unstored(settings.data_dir / "discord-unstored"),
    )
    app.platforms.add(PLATFORM, DiscordOutlets(client))  # openers and retried replies
    if rights is not None:  # the inspector asks Discord whether an admin still is one
        rights.add(PLATFORM, admin_rights(client, services.admin_ids))
    where = f"Discord at {discord.http.Route.BASE}"
    transient = (*UNREACHABLE, discord.HTTPException, discord.GatewayNotFound)

    async def login() -> None:
        try:
            await client.login(token)
        except discord.LoginFailure:
            raise ConfigError(DISCORD_REFUSED) from None

    async def gateway() -> None:
        report("starting", "signed in; connecting to the gateway")
        try:
            await client.connect(reconnect=True)  # reports `connected` from on_ready
        except discord.PrivilegedIntentsRequired:
            raise ConfigError(INTENTS_REFUSED) from None
        except discord.LoginFailure:
            raise ConfigError(DISCORD_REFUSED) from None
        except discord.ConnectionClosed as error:
            if error.code not in SHARDS_REFUSED:
                raise
            count = getattr(client, "shard_count", None)
            raise ConfigError(shards_refused(error.code, shards, count)) from None

    async def serve(first: asyncio.Task[Any] | None) -> None:
        if first is not None:
            await first  # still signing in: retrying in the background
        await gateway()

    async def signed_in() -> str:
        await login()
        return "signed in"

    report("starting", f"signing in to {where}")
    try:
        first = await _connect(signed_in, report, where, transient, "starting")
    except BaseException:
        await client.close()  # its HTTP session, before the start stops
        raise
    task = asyncio.create_task(serve(first))
    _watch(task, report, "Discord")
    try:
        yield
    finally:
        await stop_within("the Discord client", client.close())
        await _stop(task)
        await _stop(first)
