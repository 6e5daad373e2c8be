"""Slack for the chaos campaign: the Web API fake with faults, and Slack's side of the Events API.

ChaosSlack   tests.fake_slack.FakeSlack whose Web API methods first wait a random while
             and sometimes fail (HTTP 500 `internal_error`, HTTP 429 `ratelimited`), as
             `Faults` draws. A failed call is not recorded in `calls`: only what Slack
             accepted counts as shown to the member.
EventsApi    posts signed `event_callback` requests to the bot's /slack/events as Slack
             does: an event counts as acknowledged on an HTTP 200 within 3 seconds;
             otherwise it is sent again (X-Slack-Retry-Num) until acknowledged or the
             campaign gives up. Sometimes an acknowledged event is sent again, as Slack
             does when its 200 came late.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import time
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

from tests.chaos.faults import Faults
from tests.chaos.plan import SLACK_BOT, Item
from tests.fake_slack import FakeSlack, signed

SECRET = "chaos-secret"
ACK_SECONDS = 3.0  # Slack's patience with an Events API request
CALM_METHODS = {"auth.test"}  # Bolt's own start-up call: failing it only delays everything


class ChaosSlack(FakeSlack):
    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults
        self.failed: list[tuple[str, int]] = []  # (method, status) refused by chaos
        self.refuse_next_post: set[str] = set()  # channels whose next chat.postMessage gets 429
        self.responded: dict[str, str] = {}  # response_url key -> the text posted to it

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "chat.postMessage" and self.refuse_next_post and not self.faults.calm_now:
            channel = (await _arguments(request)).get("channel")
            if channel in self.refuse_next_post:
                self.refuse_next_post.discard(channel)
                self.failed.append((method, 429))
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429)
        if method not in CALM_METHODS:
            failure = await self.faults.platform_call(f"slack.{method}")
            if failure is not None:
                self.failed.append((method, failure))
                if failure == 429:
                    return web.json_response(
                        {"ok": False, "error": "ratelimited"},
                        status=429,
                        headers={"Retry-After": "1"},
                    )
                return web.json_response({"ok": False, "error": "internal_error"}, status=500)
        return await super()._api(request)

    async def _respond(self, request: web.Request) -> web.Response:
        answer = await super()._respond(request)
        self.responded[request.match_info["id"]] = str(self.responses[-1].get("text", ""))
        return answer

    def posts(self, channel: str) -> list[str]:
        """The texts the bot posted into `channel`, in order."""
        return [
            a.get("text", "")
            for a in self.called("chat.postMessage")
            if a.get("channel") == channel
        ]


async def _arguments(request: web.Request) -> dict[str, Any]:
    """A Web API call's arguments (aiohttp keeps the body, so FakeSlack can read it again)."""
    if request.content_type == "application/json":
        return dict(await request.json())
    return dict(parse_qsl(await request.text()))


class EventsApi:
    def __init__(self, api: ChaosSlack, url: str) -> None:
        self.api = api
        self.url = url
        self.giving_up = float("inf")  # time.monotonic() after which unacked events are dropped
        self.deliveries = 0  # requests sent, retries included
        self.outcomes: collections.Counter[str] = collections.Counter()  # status or error
        self._ids = itertools.count(1)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> EventsApi:
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http:
            await self._http.close()

    def body(self, item: Item) -> str:
        member = item.member
        ts = f"{1_700_000_000 + next(self._ids)}.000100"
        event: dict[str, Any] = {
            "type": "message",
            "channel": member.channel,
            "user": member.user,
            "text": item.words or "",
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im",
        }
        if item.file_name:
            self.api.files[item.file_name] = item.file_data
            event["subtype"] = "file_share"
            event["files"] = [
                {
                    "id": item.file_id,
                    "name": item.file_name,
                    "size": len(item.file_data),
                    "url_private_download": f"{self.api.root}/files/{item.file_name}",
                }
            ]
        team = member.tenant.removeprefix("slack:")
        return json.dumps(
            {
                "token": "legacy",
                "team_id": team,
                "api_app_id": "A1",
                "event": event,
                "type": "event_callback",
                "event_id": f"Ev{next(self._ids)}",
                "event_time": 1_700_000_000,
                "authorizations": [{"team_id": team, "user_id": SLACK_BOT, "is_bot": True}],
            }
        )

    async def _post(self, body: str, retry: int) -> bool:
        assert self._http is not None
        headers = signed(body, SECRET)
        if retry:
            headers.update(
                {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
            )
        self.deliveries += 1
        try:
            timeout = aiohttp.ClientTimeout(total=ACK_SECONDS)
            async with self._http.post(self.url, data=body, headers=headers, timeout=timeout) as r:
                await r.read()
                self.outcomes[str(r.status)] += 1
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError) as error:
            self.outcomes[type(error).__name__] += 1
            return False

    async def send(self, item: Item) -> None:
        """Deliver until acknowledged (or given up); then maybe once more, as Slack retries."""
        body = self.body(item)
        item.tried = True
        if item.first_reply_fails:
            self.api.refuse_next_post.add(item.member.channel)
        retry = 0
        while time.monotonic() < self.giving_up:
            if await self._post(body, retry):
                item.acked_at = time.monotonic()
                break
            retry += 1
            await asyncio.sleep(0.3 + 0.2 * min(retry, 5))
        if item.acked_at is not None and item.redeliver:
            await asyncio.sleep(0.5)
            await self._post(body, retry + 1)
