"""Slack: a Bolt app whose listeners turn Slack payloads into engine events and replies.

events.py    DMs, mentions, thread replies, file shares, team joins
commands.py  the /companion slash command, its confirmation buttons, the App Home tab

One error handler for the whole app: whatever a listener raises is logged with the ids of
the request, and the member hears that something went wrong (in the thread, or privately
for a command) instead of silence.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import SORRY, Services
from adapters.slack.commands import register_commands
from adapters.slack.events import register_events

log = logging.getLogger(__name__)


def build_slack_app(
    services: Services,
    token: str,
    signing_secret: str | None = None,
    api_url: str | None = None,
    process_before_response: bool = False,
) -> AsyncApp:
    """The Bolt app. `api_url` (SLACK_API_URL) points the Web API client elsewhere."""
    client = AsyncWebClient(token=token, base_url=api_url or AsyncWebClient.BASE_URL)
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=process_before_response,
    )
    register_events(app, services, token)
    register_commands(app, services)
    app.error(on_error)
    return app


async def on_error(error: Exception, body: dict[str, Any], client: AsyncWebClient) -> None:
    """Log what failed, then tell the member rather than leave them waiting."""
    event = body.get("event") or {}
    log.error(
        "Slack %s failed (team %s, user %s)",
        event.get("type") or body.get("type") or body.get("command") or "request",
        body.get("team_id") or (body.get("team") or {}).get("id"),
        event.get("user") or body.get("user_id") or (body.get("user") or {}).get("id"),
        exc_info=error,
    )
    if isinstance(error, SlackApiError):
        return  # Slack itself failed: an apology would fail too; the outbox retries replies
    try:
        if event.get("channel") and event.get("user"):
            thread = event.get("thread_ts") or (
                None if event.get("channel_type") == "im" else event.get("ts")
            )
            await client.chat_postMessage(channel=event["channel"], thread_ts=thread, text=SORRY)
        elif body.get("channel_id") and body.get("user_id"):  # a slash command
            await client.chat_postEphemeral(
                channel=body["channel_id"], user=body["user_id"], text=SORRY
            )
    except SlackApiError as failure:
        log.warning("could not apologise: %s", failure.response.get("error"))
