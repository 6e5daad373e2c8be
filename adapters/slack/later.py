"""What happens after Slack heard "received", and the one place Slack failures are reported.

Bolt answers Slack when a listener returns (`process_before_response=True`), for HTTP and
Socket Mode alike. So a listener only stores what it was sent, then hands the rest (lookups,
reactions, the turn, delivery, a command's work) to `after_ack`: background work the engine
counts, so a shutdown waits for it.

    not_stored(error, ...)   Bolt's error handler: a listener failed before storing; Slack
                             got a 500 and sends the event again, so nobody is told yet
    after_ack(...)           run work after the acknowledgement; a failure goes to `report`
    report(error, ...)       log with the request's ids; tell the member (in the thread, or
                             privately for a command) rather than leave them waiting
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import SORRY, Services

log = logging.getLogger(__name__)


def _ids(body: dict[str, Any]) -> tuple[str, Any, Any]:
    event = body.get("event") or {}
    return (
        event.get("type") or body.get("type") or body.get("command") or "request",
        body.get("team_id") or (body.get("team") or {}).get("id"),
        event.get("user") or body.get("user_id") or (body.get("user") or {}).get("id"),
    )


async def not_stored(error: Exception, body: dict[str, Any]) -> None:
    log.error(
        "Slack %s (team %s, user %s) was not stored; Slack gets a 500 and sends it again",
        *_ids(body),
        exc_info=error,
    )


def after_ack(
    services: Services,
    client: AsyncWebClient,
    body: dict[str, Any],
    work: Awaitable[None],
) -> None:
    async def reported() -> None:
        try:
            await work
        except Exception as error:
            await report(error, body, client)

    kind, team, user = _ids(body)
    services.engine.activity.start(reported(), f"Slack {kind} of {user} in {team}")


async def report(error: Exception, body: dict[str, Any], client: AsyncWebClient) -> None:
    """Log what failed, then tell the member rather than leave them waiting."""
    log.error("Slack %s failed (team %s, user %s)", *_ids(body), exc_info=error)
    if isinstance(error, SlackApiError):
        return  # Slack itself failed: an apology would fail too; the outbox retries replies
    event = body.get("event") or {}
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
