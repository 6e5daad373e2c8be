"""Replies into Slack messages, posted once as the member sees them.

    post_reply(client, channel, thread_ts, text)   the reply's parts, tagged, skipping parts
                                                   an earlier attempt already posted

Each part of an outbox reply carries message metadata (`companion_reply`, the reply's key and
the part's number). When the outbox says an earlier attempt may have posted the reply (a
process killed between the post and marking it sent: `core.runtime.outbox.Posting.since`),
the channel (or thread) is read back from a little before that time, and the parts found
there are not posted again. Reading needs the history scopes the manifest asks for; without
them the reply goes out again (logged): a second copy rather than none.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.text import split_message, to_slack_mrkdwn
from core.runtime.outbox import Posting, posting

log = logging.getLogger(__name__)
SLACK_TEXT_LIMIT = 3000  # a section block's text limit
REPLY_EVENT = "companion_reply"  # the metadata event type of a reply's post
LOOK_BACK = timedelta(minutes=2)  # clocks differ: read from a little before the reply was made
# The errors that mean "cannot look here", not "Slack is down": the reply is posted anyway.
CANNOT_LOOK = {"missing_scope", "not_in_channel", "channel_not_found", "no_permission"}


def no_pings(text: str) -> str:
    """The model's words must not ping a channel or people: escape Slack's special links."""
    return re.sub(r"<([!@#])", r"&lt;\1", text)


async def post_reply(
    client: AsyncWebClient, channel: str, thread_ts: str | None, text: str
) -> None:
    """Post `text` (in parts of at most SLACK_TEXT_LIMIT) to the channel or thread."""
    reply = posting()
    parts = split_message(no_pings(to_slack_mrkdwn(text)), SLACK_TEXT_LIMIT)
    done = await _posted_parts(client, channel, thread_ts, reply) if reply else set()
    for number, part in enumerate(parts):
        if reply is not None and number in done:
            log.info("part %s of reply %s was posted before: not again", number, reply.key)
            continue
        extra: dict[str, Any] = {}
        if reply is not None:
            payload = {"reply": reply.key, "part": number}
            extra["metadata"] = {"event_type": REPLY_EVENT, "event_payload": payload}
        await client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=part,
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": part}}],
            **extra,
        )


async def _posted_parts(
    client: AsyncWebClient, channel: str, thread_ts: str | None, reply: Posting
) -> set[int]:
    """The parts of `reply` already in the channel (none to look for on a first attempt)."""
    if reply.since is None:
        return set()
    oldest = f"{(reply.since - LOOK_BACK).timestamp():.6f}"
    try:
        if thread_ts:
            found = await client.conversations_replies(
                channel=channel, ts=thread_ts, oldest=oldest, include_all_metadata=True, limit=200
            )
        else:
            found = await client.conversations_history(
                channel=channel, oldest=oldest, include_all_metadata=True, limit=200
            )
    except SlackApiError as error:
        code = error.response.get("error")
        if code not in CANNOT_LOOK:
            raise  # Slack is failing: this attempt fails, the next one looks again
        log.warning(
            "cannot read %s to see whether reply %s was posted before (%s): posting it",
            channel,
            reply.key,
            code,
        )
        return set()
    parts: set[int] = set()
    for message in found.get("messages") or []:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == REPLY_EVENT and payload.get("reply") == reply.key:
            parts.add(int(payload.get("part", 0)))
    return parts
