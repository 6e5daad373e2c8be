"""The platforms as the adapters meet them: one Slack rig and one Discord rig for every test.

Slack    `slack_rig(services)` builds the real Bolt app against `FakeSlack` (a stand-in for
         the Web API, tests/fake_slack.py), as `companion run` builds it. `SlackRig.dispatch`
         hands Bolt a signed Events API payload (`slack_message`, `slack_envelope`); `command`
         and `press` send a signed `/companion` form or button press and return what it
         answered on the response_url. Each returns once the work the app runs after its
         acknowledgement (the turn, the answer, the command's work) is done too.
Discord  `discord_rig(services, ...)` logs the real discord.py client in to `FakeDiscord`
         (tests/fake_discord.py), feeds it READY and GUILD_CREATE and waits for the command
         sync. `DiscordRig.say`, `slash` and `click` feed MESSAGE_CREATE and INTERACTION_CREATE
         payloads and `settle()` until every handler they started has finished;
         `reconnect()` starts a new gateway session, as after a restart.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import discord
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from adapters.common import Services
from adapters.discord import build_discord_client
from adapters.discord.client import CompanionClient
from adapters.slack import build_slack_app
from core.members.service import Members
from tests.fake_discord import (
    FakeDiscord,
    button_click,
    command,
    member,
    message,
    ready,
    snowflake,
    user,
)
from tests.fake_slack import BACKGROUND, BOT_USER, TEAM, FakeSlack, signed
from tests.fake_slack import settle as settle_slack

# --- Slack -----------------------------------------------------------------------------------

SLACK_SECRET = "test-signing-secret"
_ts = itertools.count(100)  # one counter: event ids and message times never repeat in a run


def slack_envelope(event: dict[str, Any]) -> dict[str, Any]:
    """An Events API callback carrying `event`, as Slack posts it."""
    return {
        "token": "legacy",
        "team_id": TEAM,
        "api_app_id": "A1",
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{next(_ts)}",
        "event_time": 1700000000,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
    }


def slack_ts() -> str:
    """A message time stamp no other event of this run has."""
    return f"17{next(_ts):08d}.000100"


def slack_message(
    user: str = "U1", text: str = "hello", channel: str = "D1", channel_type: str = "im", **extra
) -> dict[str, Any]:
    """A `message` event (a DM unless `channel_type` says otherwise) in its envelope."""
    ts = slack_ts()
    event = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "channel_type": channel_type,
        "event_ts": ts,
        **extra,
    }
    return slack_envelope(event)


@dataclass
class SlackRig:
    app: Any  # slack_bolt's AsyncApp
    api: FakeSlack
    services: Services

    @property
    def members(self) -> Members:
        return self.services.members

    def posted(self) -> list[dict[str, Any]]:
        """Every chat.postMessage call so far."""
        return self.api.called("chat.postMessage")

    async def dispatch(
        self,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
        secret: str = SLACK_SECRET,
    ) -> BoltResponse:
        """Bolt's answer to an Events API POST of `payload`, signed with `secret`."""
        body = json.dumps(payload)
        signed_headers = {**signed(body, secret), **(headers or {})}
        response = await self.app.async_dispatch(
            AsyncBoltRequest(body=body, headers=signed_headers)
        )
        await settle_slack()
        return response

    async def command(self, text: str, user: str = "U1") -> list[dict[str, Any]]:
        """`/companion TEXT` typed by `user`: what it posted to its response_url."""
        return await self._form(
            {
                "token": "legacy",
                "team_id": TEAM,
                "user_id": user,
                "command": "/companion",
                "text": text,
                "channel_id": "C1",
                "trigger_id": "t",
                "response_url": f"{self.api.root}/respond/{next(_ts)}",
            }
        )

    async def press(self, action_id: str, value: str, user: str = "U1") -> list[dict[str, Any]]:
        """`user` presses the button `action_id` carrying `value`: what it posted back."""
        payload = {
            "type": "block_actions",
            "user": {"id": user},
            "team": {"id": TEAM},
            "api_app_id": "A1",
            "token": "legacy",
            "trigger_id": "t",
            "response_url": f"{self.api.root}/respond/{next(_ts)}",
            "container": {},
            "actions": [
                {
                    "action_id": action_id,
                    "value": value,
                    "type": "button",
                    "block_id": "b",
                    "action_ts": "1",
                }
            ],
        }
        return await self._form({"payload": json.dumps(payload)})

    async def _form(self, form: dict[str, str]) -> list[dict[str, Any]]:
        before = len(self.api.responses)
        body = urlencode(form)
        headers = {
            **signed(body, SLACK_SECRET),
            "content-type": "application/x-www-form-urlencoded",
        }
        response = await self.app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
        assert response.status == 200
        await settle_slack()
        return self.api.responses[before:]


@asynccontextmanager
async def slack_rig(
    services: Services, users: tuple[str, ...] = (), admins: tuple[str, ...] = ()
) -> AsyncIterator[SlackRig]:
    """The Bolt app on `services` against a fresh FakeSlack that knows `users` and `admins`."""
    async with FakeSlack() as api:
        for name in users:
            api.add_user(name)
        for name in admins:
            api.add_user(name, admin=True)
        app = build_slack_app(services, "xoxb-test", SLACK_SECRET, api.base_url)
        yield SlackRig(app, api, services)


# --- Discord ---------------------------------------------------------------------------------

HANDLER_TASKS = ("discord.py: ", "CommandTree-invoker", "discord-ui-view-dispatch", BACKGROUND)


async def settle(within: float = 30.0) -> None:
    """Wait until every Discord event handler, command and button callback has finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        pending = [
            t
            for t in asyncio.all_tasks()
            if t.get_name().startswith(HANDLER_TASKS) and not t.done()
        ]
        if not pending:
            return
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"handlers still running: {pending}")
        await asyncio.wait(pending, timeout=left)


@dataclass
class DiscordRig:
    client: CompanionClient
    api: FakeDiscord
    services: Services
    bot: dict[str, Any]  # the bot's user payload
    server: dict[str, Any]  # GUILD_CREATE of the server
    guild_id: int
    channel_id: int  # the server's text channel where messages and commands go by default
    names: Callable[[int], str]  # the display name of a user id

    @property
    def members(self) -> Members:
        return self.services.members

    @property
    def state(self) -> Any:
        return self.client._connection

    def member(self, user_id: int, **extra: Any) -> dict[str, Any]:
        """`user_id` as a member of the server (a GUILD_MEMBER payload)."""
        return member(user_id, self.names(user_id), **extra)

    async def say(
        self,
        author: int,
        content: str,
        channel: int | None = None,
        *,
        dm: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        """`author` posts `content` in the server (or, with `dm`, in their DM with the bot)."""
        who = extra.pop("author_payload", None) or user(author, self.names(author))
        if dm:
            assert channel is not None, "a DM needs its channel"
            payload = message(who, channel, content, **extra)
        else:
            if "author_member" not in extra:
                extra["author_member"] = self.member(author)
            channel = channel or self.channel_id
            payload = message(who, channel, content, guild_id=self.guild_id, **extra)
        self.state.parse_message_create(payload)
        await settle()
        return payload

    async def mention(
        self, author: int, text: str, channel: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """`author` says `text` to the bot by @-mentioning it in the server."""
        extra.setdefault("mentions", [self.bot])
        return await self.say(author, f"<@{self.bot['id']}> {text}", channel, **extra)

    async def slash(
        self,
        who: int,
        name: str,
        *options: dict[str, Any],
        permissions: int = 0,
        in_dm: bool = False,
        channel: int | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        """`who` runs the slash command `name` (in the server, or in a DM with `in_dm`)."""
        app_id = self.api.application_id
        if in_dm:
            caller, guild, channel = user(who, self.names(who)), None, channel or snowflake()
        else:
            caller, guild = self.member(who, permissions=permissions), self.guild_id
            channel = channel or self.channel_id
        payload = command(
            app_id, caller, name, list(options), guild_id=guild, channel_id=channel, **kw
        )
        self.state.parse_interaction_create(payload)
        await settle()
        return payload

    async def click(
        self, who: int, asked: dict[str, Any], label: str, permissions: int = 0
    ) -> dict[str, Any]:
        """`who` presses the button labelled `label` on what the command `asked` showed."""
        shown = self.api.shown[int(asked["id"])]
        buttons = [c for row in shown["components"] for c in row["components"]]
        custom_id = next(b["custom_id"] for b in buttons if b["label"] == label)
        payload = button_click(
            self.api.application_id,
            self.member(who, permissions=permissions),
            shown,
            custom_id,
            guild_id=self.guild_id,
            channel_id=self.channel_id,
        )
        self.state.parse_interaction_create(payload)
        await settle()
        return payload

    async def reconnect(self) -> None:
        """A new gateway session (READY, then the server), as after a restart; returns once
        what on_ready started is done."""
        app_id = self.api.application_id
        self.state.parse_ready(ready(self.bot, app_id, [self.guild_id]))
        self.state.parse_guild_create(self.server)
        await asyncio.wait_for(self.state._ready_task, 10)  # READY comes after the servers
        await settle()

    def answers(self, interaction: dict[str, Any]) -> list[str]:
        """Everything the interaction showed: its callback, follow-ups and edits."""
        bodies = [c.body.get("data") or {} for c in self.api.callbacks(interaction)]
        bodies += [c.body for c in self.api.followups(interaction) + self.api.edits(interaction)]
        return [body.get("content") or "" for body in bodies]


@asynccontextmanager
async def discord_rig(
    services: Services,
    *,
    bot: dict[str, Any],
    app_id: int,
    server: dict[str, Any],
    channel_id: int,
    names: Callable[[int], str],
) -> AsyncIterator[DiscordRig]:
    """The client on `services`, logged in to a fresh FakeDiscord and in the guild `server`."""
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    try:
        async with FakeDiscord(bot, app_id) as api:
            client = build_discord_client(
                services, api_url=api.api_url, gateway_url="ws://127.0.0.1:9/gateway"
            )
            assert isinstance(client, CompanionClient)
            assert discord.http.Route.BASE == api.api_url  # never the real Discord
            client._connection.guild_ready_timeout = 0.05
            await client.login("fake-token")
            guild_id = int(server["id"])
            client._connection.parse_ready(ready(bot, app_id, [guild_id]))
            client._connection.parse_guild_create(server)
            await api.wait_for(lambda: api.find("PUT", f"/applications/{app_id}/commands"))
            await settle()
            try:
                yield DiscordRig(client, api, services, bot, server, guild_id, channel_id, names)
            finally:
                await settle()
                await client.close()
    finally:
        discord.http.Route.BASE = base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway


@asynccontextmanager
async def elsewhere() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A server off the platforms (its address, and the headers of each request it got):
    what a file link pointing outside Discord or Slack would reach."""
    from aiohttp import web

    asked: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(dict(request.headers))
        return web.Response(body=b"internal metadata")

    app = web.Application()
    app.router.add_get("/{name}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        await runner.cleanup()
