"""Slack: a Bolt app whose listeners turn Slack payloads into engine events and replies.

events.py    DMs, mentions, thread replies, file shares, team joins
commands.py  the /companion slash command, its confirmation buttons, the App Home tab
later.py     work after Slack's acknowledgement; the one place failures are reported
oauth.py     the install flow for any workspace, a bot token per workspace (distribution)

Slack hears "received" only once the event is stored: Bolt answers when a listener returns
(`process_before_response`, in HTTP and Socket Mode), and a listener returns as soon as the
event is in the database. Everything else runs after, as work the engine counts. A listener
that fails before storing answers 500, so Slack sends the event again.

One workspace: SLACK_BOT_TOKEN. Any workspace: a `Distribution` (oauth.py), whose
installations give each request its workspace's token; the app then also serves the
install pages and handles app_uninstalled and tokens_revoked (the installation is removed,
the community's memory waits out its grace period).
"""

from __future__ import annotations

import logging

from aiohttp import ClientSession
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import Services
from adapters.slack.commands import register_commands
from adapters.slack.events import register_events
from adapters.slack.later import not_stored
from adapters.slack.oauth import Distribution


def build_slack_app(
    services: Services,
    token: str | None,
    signing_secret: str | None = None,
    api_url: str | None = None,
    session: ClientSession | None = None,
    distribution: Distribution | None = None,
) -> AsyncApp:
    """The Bolt app: with `token` for one workspace, with `distribution` for any.
    `api_url` (SLACK_API_URL) points the Web API client elsewhere; with a `session`, its
    Web API calls share its connections (without, each call opens one)."""
    base_url = api_url or AsyncWebClient.BASE_URL
    client = AsyncWebClient(token=token, base_url=base_url, session=session)
    app = AsyncApp(
        # Bolt's loggers, under `slack_bolt` (else Bolt copies the root's level onto them and
        # narrates each Socket Mode session at INFO): the process's log settings rule them.
        name="slack_bolt.companion",
        logger=logging.getLogger("slack_bolt.AsyncApp"),
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=True,  # the listeners store, then return: then Slack hears
        oauth_settings=distribution.settings if distribution else None,
    )
    register_events(app, services)
    register_commands(app, services)
    if distribution:
        app.enable_token_revocation_listeners()  # through Installations: the tenant departs
    app.error(not_stored)
    return app
