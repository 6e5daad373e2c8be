"""The platform checks: Slack's token and mode, Discord's token and intents."""

from __future__ import annotations

import asyncio

import aiohttp

from bot.doctor.results import TIMEOUT, Result, fail, ok, warn
from bot.doctor.results import why as _why
from bot.log_filters import redact
from bot.settings import Settings

SLACK_URL = "https://slack.com/api/"


async def check_platforms(settings: Settings) -> list[Result]:
    if not settings.slack and not settings.discord_token:
        return [
            ok(
                "platforms: none configured: `companion chat` works; `companion run` needs "
                "DISCORD_TOKEN and/or SLACK_BOT_TOKEN (see README: Configuration)"
            )
        ]
    return await check_slack(settings) + await check_discord(settings)


async def check_slack(settings: Settings) -> list[Result]:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    token = settings.slack_bot_token
    if settings.slack_oauth:
        return [check_slack_oauth(settings)]
    if not token:
        return []
    where = settings.slack_api_url or SLACK_URL
    client = AsyncWebClient(token=token, base_url=where, timeout=int(TIMEOUT))
    try:
        answer = await client.auth_test()
        results = [ok(f"Slack: signed in as {answer.get('user')} in team {answer.get('team_id')}")]
    except SlackApiError as error:
        results = [
            fail(
                f"Slack: SLACK_BOT_TOKEN was refused ({error.response.get('error')}); copy the "
                "Bot User OAuth Token (xoxb-…) from your app's OAuth & Permissions page"
            )
        ]
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        results = [fail(f"Slack: cannot reach {where} ({_why(error)}); check SLACK_API_URL")]
    if settings.slack_app_token:
        results.append(
            ok("Slack: Socket Mode (SLACK_APP_TOKEN)")
            if settings.slack_app_token.startswith("xapp-")
            else fail(
                "Slack: SLACK_APP_TOKEN must start with xapp-: an app-level token with "
                "connections:write, from your app's Basic Information page"
            )
        )
    elif settings.slack_signing_secret:
        results.append(
            ok(f"Slack: HTTP mode, events at port {settings.http_port} path /slack/events")
        )
    else:
        results.append(
            fail(
                "Slack: set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode, "
                "from your app's Basic Information page)"
            )
        )
    return results


async def check_discord(settings: Settings) -> list[Result]:
    import discord

    token = settings.discord_token
    if not token:
        return []
    from adapters.discord import use_discord_hosts

    use_discord_hosts(settings.discord_api_url)
    where = discord.http.Route.BASE
    client = discord.Client(intents=discord.Intents(guilds=True))  # REST only: no gateway
    try:
        async with asyncio.timeout(TIMEOUT):
            await client.login(token)
        results = [ok(f"Discord: signed in as {client.user}")]
        flags = client.application.flags if client.application else discord.ApplicationFlags()
        for needed, intent, flag in (
            ("Message Content Intent", "message contents", "gateway_message_content"),
            ("Server Members Intent", "member joins", "gateway_guild_members"),
        ):
            if not (getattr(flags, flag) or getattr(flags, f"{flag}_limited")):
                results.append(
                    fail(
                        f"Discord: the bot cannot see {intent}; turn on {needed} under Bot "
                        "in the Discord Developer Portal"
                    )
                )
        return results
    except discord.LoginFailure:
        return [
            fail(
                "Discord: DISCORD_TOKEN was refused; reset the token under Bot in the Discord "
                "Developer Portal and set the new one"
            )
        ]
    except discord.HTTPException as error:
        return [fail(f"Discord: {where} answered HTTP {error.status}: {redact(error.text)}")]
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        return [fail(f"Discord: cannot reach {where} ({_why(error)}); check DISCORD_API_URL")]
    finally:
        await client.close()


def check_slack_oauth(settings: Settings) -> Result:
    """Any workspace: each token comes with its installation; what can be checked is the
    set of credentials and where Slack sends installers back."""
    missing = [
        name
        for name, value in (
            ("SLACK_CLIENT_SECRET", settings.slack_client_secret),
            ("SLACK_SIGNING_SECRET", settings.slack_signing_secret),
        )
        if not value
    ]
    if missing:
        return fail(f"Slack: SLACK_CLIENT_ID needs {' and '.join(missing)} (Basic Information)")
    if not settings.secret_key:
        return fail(
            "Slack: SLACK_CLIENT_ID keeps each workspace's tokens sealed with a key from "
            "COMPANION_SECRET_KEY: set it (`openssl rand -hex 32`) and keep it"
        )
    if not settings.public_url:
        return warn(
            f"Slack: any workspace, but Slack sends installers back to {settings.base_url}"
            "/slack/oauth_redirect: set COMPANION_PUBLIC_URL to the address Slack can reach"
        )
    return ok(
        f"Slack: any workspace installs the app at {settings.base_url}/slack/install "
        f"(Redirect URL {settings.base_url}/slack/oauth_redirect)"
    )
