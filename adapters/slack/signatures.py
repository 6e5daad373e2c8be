"""Requests Slack's path refused for their signature: one warning with the fix, now and then.

Bolt refuses a request whose signature does not match SLACK_SIGNING_SECRET with a 401 and
says so at INFO, with the request's body, which our log policy withholds (members' words
stay at DEBUG) along with the rest of Bolt's INFO lines. An operator whose secret is wrong
or was rotated would see nothing while every event is refused. So the HTTP server counts
the 401s of Slack's path and warns once per `every` (10 minutes), with how many were
refused meanwhile and what to check: never a body, a header or anything a member wrote.
A body that is not text (not UTF-8, or in a charset no one has) is no request of Slack's:
it is answered 400 before Bolt, which would fail decoding it (a 500 and a traceback).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)
EVERY_SECONDS = 600.0
NOT_SLACKS = "This is not a request from Slack."


class RefusedSignatures:
    """Counts refused requests; `refused(now)` says whether this one is to be warned of."""

    def __init__(self, every: float = EVERY_SECONDS) -> None:
        self.every = every
        self.count = 0  # refused since the last warning
        self.warned_at: float | None = None

    def refused(self, now: float) -> int:
        """The number refused since the last warning (this one included) when it is time to
        warn again, else 0."""
        self.count += 1
        if self.warned_at is not None and now - self.warned_at < self.every:
            return 0
        count, self.count, self.warned_at = self.count, 0, now
        return count


def watch_signatures(
    web_app: web.Application,
    path: str,
    refusals: RefusedSignatures | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    """`web_app` (Bolt's) with a warning when requests to `path` are refused as unsigned."""
    refusals = refusals or RefusedSignatures()

    @web.middleware
    async def warn_of_refusals(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path == path:
            try:
                (await request.read()).decode(request.charset or "utf-8")
            except (UnicodeDecodeError, LookupError):
                return web.Response(status=400, text=NOT_SLACKS)
        response = await handler(request)
        if response.status == 401 and request.path == path:
            count = refusals.refused(clock())
            if count:
                minutes = round(refusals.every / 60)
                log.warning(
                    "Slack requests refused: %d whose signature does not match "
                    "SLACK_SIGNING_SECRET since the last such warning (one per %d minutes); "
                    "check SLACK_SIGNING_SECRET against the Signing Secret on your Slack "
                    "app's Basic Information page, and this machine's clock",
                    count,
                    minutes,
                )
        return response

    web_app.middlewares.append(warn_of_refusals)
    return web_app
