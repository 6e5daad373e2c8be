"""Posting a reply on any platform, once as the member sees it: the one loop, and its routes.

    Outlet                 what a platform supplies for one place (a channel, a thread, a
                           DM): `post` one part, tagged; `posted`, its own posts there since a
                           time, as it can read them back; its `limit` and `markup`
    post_reply(outlet, text, posting)   split the text, read back what an earlier attempt
                           posted, post the rest
    sending(outlet)        that as a `Send`
    Outlets                where a platform posts outside a live handler: `direct` (a DM to
                           the member), `written` (back where they wrote, from the event's meta)
    where_written(...), direct(...)   the `Send` of a retried reply (where they wrote, else
                           a DM) and of an opener (a DM), for `bot.delivery.Router`

Each part of an outbox reply goes out tagged with the reply's key and the part's number
(Slack: message metadata; Discord: a nonce it enforces for a few minutes). When the outbox
says an earlier attempt may have posted the reply (a process killed between the post and
marking it sent: `Posting.since`), the place is read back from a little before that time,
and the parts found there are not posted again: by their tag where the platform shows it,
else by their exact text among the bot's own posts. Where the platform cannot look
(`CannotReadBack`: a missing scope or permission), the reply goes out again, logged: a
second copy rather than none. A first attempt never reads back (a rate-limited call).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from adapters.text import split_message
from core.ports import Posting, Send

log = logging.getLogger(__name__)
LOOK_BACK = timedelta(minutes=2)  # clocks differ: read from a little before the reply was made


@dataclass(frozen=True)
class Tag:
    """What one part of an outbox reply is posted with: the reply's key and the part."""

    key: str
    part: int

    def __str__(self) -> str:
        return f"{self.key}.{self.part}"


@dataclass(frozen=True)
class Post:
    """One of the bot's own posts, read back: its tag where the platform shows it, else its
    text (compared word for word with the parts)."""

    tag: str | None = None
    text: str | None = None


class CannotReadBack(Exception):
    """The platform will not let the bot read this place back (not that it is down)."""


class Outlet(Protocol):
    """One place a platform posts to."""

    limit: int  # characters in one post

    def markup(self, text: str) -> str:
        """The model's words as the platform writes them."""
        ...

    async def post(self, part: str, tag: Tag | None) -> None:
        """Post one part; `tag` (an outbox reply's) goes with it where the platform can."""
        ...

    async def posted(self, after: datetime) -> list[Post]:
        """The bot's own posts here since `after`; `CannotReadBack` when it may not look."""
        ...


async def post_reply(outlet: Outlet, text: str, posting: Posting | None = None) -> None:
    """Post `text` in parts of at most `outlet.limit`, but for the parts of `posting` that
    an earlier attempt already posted."""
    parts = split_message(outlet.markup(text), outlet.limit)
    done = await _posted_before(outlet, parts, posting) if posting else set()
    for number, part in enumerate(parts):
        if number not in done:
            await outlet.post(part, Tag(posting.key, number) if posting else None)


async def _posted_before(outlet: Outlet, parts: list[str], posting: Posting) -> set[int]:
    """The parts already there (none to look for on a first attempt)."""
    if posting.since is None:
        return set()
    try:
        found = await outlet.posted(posting.since - LOOK_BACK)
    except CannotReadBack as why:
        log.warning(
            "cannot read channel back (%s) to see whether reply %s was posted before: posting it",
            why,
            posting.key,
        )
        return set()
    tags = {post.tag for post in found if post.tag}
    texts = {post.text for post in found if post.tag is None and post.text is not None}
    done = {
        number
        for number, part in enumerate(parts)
        if str(Tag(posting.key, number)) in tags or part in texts
    }
    if done:
        log.info("parts %s of reply %s were posted before: not again", sorted(done), posting.key)
    return done


def sending(outlet: Callable[[], Awaitable[Outlet]]) -> Send:
    """A `Send` that posts to the place `outlet()` finds (when the first text goes)."""

    async def send(text: str, posting: Posting | None = None) -> None:
        await post_reply(await outlet(), text, posting)

    return send


class Outlets(Protocol):
    """Where a platform posts outside a live handler."""

    async def direct(self, tenant: str, user: str) -> Outlet:
        """A direct message to the member."""
        ...

    async def written(self, tenant: str, meta: dict[str, Any]) -> Outlet | None:
        """Where the member wrote, from the event's meta; None when it names no place."""
        ...


def where_written(outlets: Outlets, tenant: str, user: str, meta: dict[str, Any]) -> Send:
    """A retried reply: back where the member wrote, else (an event from no place, such as
    a join or an opener) a direct message."""

    async def place() -> Outlet:
        return await outlets.written(tenant, meta) or await outlets.direct(tenant, user)

    return sending(place)


def direct(outlets: Outlets, tenant: str, user: str) -> Send:
    """A direct message to the member: an opener."""
    return sending(lambda: outlets.direct(tenant, user))
