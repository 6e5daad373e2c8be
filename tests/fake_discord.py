"""A local server that plays Discord's REST API, and gateway payloads as Discord sends them.

The real discord.py client logs in against `FakeDiscord.api_url` and makes real HTTP calls;
every request is recorded as a `Call` (method, path below the API root, JSON body, or the
`payload_json` and files of a multipart body). It answers what the adapter needs: the bot
user and application, typing, messages (given ids, echoed back), DM channels (403 for users
in `closed_dms`), interaction callbacks (`with_response` shape), webhook follow-ups and
edits, command sync, and attachment downloads from `files` (one in `broken` drops the
connection). Reading back: a channel's `history` (what members posted, as message payloads;
`GET /channels/{id}/messages` with `after` and `limit`, newest first as Discord answers; the
bot's own posts too, kept in `posted` with snowflakes of the time they were made) and
`GET /channels/{id}` (from `channels`, or a DM channel of `dm_channels`). `on_call(call)`,
when set, runs as each request arrives; `typing_status` is what the typing endpoint answers
(204).

It also plays the gateway, at `gateway_url`: HELLO, IDENTIFY (with or without shard ids),
READY and a GUILD_CREATE for each server of `guilds` that belongs to the shard, heartbeat
ACKs. `dispatch(event, payload)` sends an event to the connection Discord would send it to:
a server's events to shard (guild_id >> 22) % shard_count, DMs to shard 0 (GatewayMissing
when no connection has that shard). `identified` lists (shard id, count, token) of every
IDENTIFY; `GET /gateway/bot` recommends `recommended_shards` and gives `bot_gateway_url`
(this fake's gateway unless set) and `max_concurrency` (16, as Discord gives large bots:
their shards identify side by side instead of one every 5 s). Like Discord, it can refuse an
IDENTIFY by closing with a code (`refuse_identify`: 4011 sharding required, 4010 invalid
shard), drop a shard's connection (`drop`), and keep a shard waiting for its READY (`held`)
until released. Every REST call records the token it carried (`Call.token`), so tests can
tell which process sent it.

The functions below build gateway payload dicts (READY, GUILD_CREATE, MESSAGE_CREATE,
GUILD_MEMBER_ADD, INTERACTION_CREATE) in the shapes of Discord's API documentation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import discord
from aiohttp import web

_ids = itertools.count(1_300_000_000_000_000_001)
WHEN = "2026-03-01T12:00:00.000000+00:00"
MANAGE_GUILD = 0x20
EPHEMERAL = 64


def snowflake() -> int:
    return next(_ids)


@dataclass
class Call:
    method: str
    path: str  # below /api/v10, e.g. /channels/123/messages
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    files: dict[str, bytes] = field(default_factory=dict)  # file name -> content
    token: str = ""  # the Authorization header, e.g. "Bot fake-token"


class GatewayMissing(LookupError):
    """No gateway connection runs the shard an event belongs to."""


@dataclass
class Connection:
    socket: web.WebSocketResponse
    shard: int
    count: int
    sequence: int = 0

    async def send(self, event: str, payload: dict[str, Any]) -> None:
        self.sequence += 1
        await self.socket.send_json({"op": 0, "t": event, "s": self.sequence, "d": payload})


class FakeDiscord:
    def __init__(self, bot: dict[str, Any], application_id: int) -> None:
        self.bot = bot
        self.application_id = application_id
        self.calls: list[Call] = []
        self.files: dict[str, bytes] = {}
        self.broken: set[str] = set()  # attachments whose download drops the connection
        self.closed_dms: set[int] = set()
        self.dm_channels: dict[int, int] = {}  # user id -> DM channel id
        self.shown: dict[int, dict[str, Any]] = {}  # interaction id -> the message it showed
        self.history: dict[int, list[dict[str, Any]]] = {}  # channel id -> posted messages
        self.posted: dict[int, list[dict[str, Any]]] = {}  # channel id -> the bot's messages
        self._last_post = 0
        self.channels: dict[int, dict[str, Any]] = {}  # channel id -> its payload
        self.on_call: Callable[[Call], Awaitable[None]] | None = None
        self.typing_status = 204
        self.history_refused: set[int] = set()  # channels where reading back answers 403
        self.token_refused = False  # True: every call answers 401, as for a reset token
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.root = ""
        self.guilds: dict[int, dict[str, Any]] = {}  # guild id -> its GUILD_CREATE payload
        self.recommended_shards = 1
        self.bot_gateway_url: str | None = None  # what GET /gateway/bot gives; None: ours
        self.gateway_bot_down = 0  # so many GET /gateway/bot answer 503, as in an outage
        self.max_concurrency = 16  # IDENTIFYs per 5 s (GET /gateway/bot; 1 for most bots)
        self.identified: list[tuple[int, int, str]] = []  # (shard id, count, token)
        self.connections: list[Connection] = []
        self.refuse_identify: tuple[int, str] | None = None  # (close code, reason)
        self.held: set[int] = set()  # shards whose IDENTIFY waits for READY until released

    @property
    def gateway_url(self) -> str:
        return self.root.replace("http://", "ws://") + "/gateway"

    @property
    def api_url(self) -> str:
        return f"{self.root}/api/v10"

    def file_url(self, name: str) -> str:
        return f"{self.root}/attachments/{name}"

    # What tests read

    def find(self, method: str, pattern: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and re.fullmatch(pattern, c.path)]

    def sent(self, channel_id: int) -> list[Call]:
        return self.find("POST", f"/channels/{channel_id}/messages")

    def texts(self, channel_id: int) -> list[str]:
        return [c.body["content"] for c in self.sent(channel_id)]

    def callbacks(self, interaction: dict[str, Any]) -> list[Call]:
        return self.find(
            "POST", f"/interactions/{interaction['id']}/{interaction['token']}/callback"
        )

    def followups(self, interaction: dict[str, Any]) -> list[Call]:
        return self.find("POST", f"/webhooks/{self.application_id}/{interaction['token']}")

    def edits(self, interaction: dict[str, Any]) -> list[Call]:
        path = f"/webhooks/{self.application_id}/{interaction['token']}/messages/@original"
        return self.find("PATCH", path)

    async def wait_for(self, check: Callable[[], Any], within: float = 10.0) -> Any:
        async def until() -> Any:
            async with self._changed:
                while not (result := check()):
                    await self._changed.wait()
                return result

        return await asyncio.wait_for(until(), within)

    # The gateway

    def connection(self, guild_id: int | None) -> Connection:
        """The live connection Discord would send an event of `guild_id` (None: a DM) to."""
        for conn in reversed(self.connections):  # the newest session of a shard wins
            if conn.socket.closed:
                continue
            shard = 0 if guild_id is None else (guild_id >> 22) % conn.count
            if conn.shard == shard:
                return conn
        raise GatewayMissing(f"no gateway connection has the shard of guild {guild_id}")

    async def dispatch(self, event: str, payload: dict[str, Any]) -> int:
        """Send a gateway event where Discord would; returns the shard it went to."""
        guild_id = payload.get("guild_id")
        conn = self.connection(int(guild_id) if guild_id else None)
        await conn.send(event, payload)
        return conn.shard

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
        async for frame in socket:
            if frame.type != web.WSMsgType.TEXT:
                break
            data = json.loads(frame.data)
            if data["op"] == 1:  # heartbeat
                await socket.send_json({"op": 11})
            elif data["op"] == 2:  # identify
                await self._identify(socket, data["d"])
            elif data["op"] == 6:  # resume: not kept here, so start a new session
                await socket.send_json({"op": 9, "d": False})
        async with self._changed:
            self._changed.notify_all()
        return socket

    async def drop(self, shard: int, code: int = 4000) -> None:
        """Close a shard's live connection as Discord does when it goes away (4000: an
        unknown error, which a client answers by reconnecting)."""
        conn = next(c for c in reversed(self.connections) if c.shard == shard)
        await conn.socket.close(code=code, message=b"dropped by the test")

    async def release(self, shard: int) -> None:
        self.held.discard(shard)
        async with self._changed:
            self._changed.notify_all()

    async def _identify(self, socket: web.WebSocketResponse, data: dict[str, Any]) -> None:
        shard, count = data.get("shard") or (0, 1)
        conn = Connection(socket, shard, count)
        self.identified.append((shard, count, data.get("token", "")))
        async with self._changed:
            self._changed.notify_all()
            while shard in self.held:
                await self._changed.wait()
        if self.refuse_identify is not None:
            code, reason = self.refuse_identify
            await socket.close(code=code, message=reason.encode())
            return
        mine = [g for g in self.guilds if (g >> 22) % count == shard]
        session = ready(self.bot, self.application_id, mine)
        session["resume_gateway_url"] = self.gateway_url
        await conn.send("READY", {**session, "shard": [shard, count]})
        for guild_id in mine:
            await conn.send("GUILD_CREATE", self.guilds[guild_id])
        self.connections.append(conn)
        async with self._changed:
            self._changed.notify_all()

    # The server

    async def _record(self, request: web.Request) -> Call:
        path = request.path.removeprefix("/api/v10")
        call = Call(request.method, path, query=dict(request.query))
        call.token = request.headers.get("Authorization", "")
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    call.body = json.loads(await part.text())
                elif part.filename:
                    call.files[part.filename] = bytes(await part.read())
        elif request.can_read_body:
            call.body = await request.json()
        return call

    nick_refused = False  # True: the bot lacks Change Nickname

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/gateway":
            return await self._gateway(request)
        call = await self._record(request)
        if request.path.startswith("/attachments/") and request.path[13:] in self.broken:
            assert request.transport is not None
            request.transport.close()  # the connection drops: no answer at all
        if self.on_call is not None:
            await self.on_call(call)
        response = self._answer(call)
        self.calls.append(call)
        async with self._changed:
            self._changed.notify_all()
        return response

    def _answer(self, call: Call) -> web.StreamResponse:
        method, path, body = call.method, call.path, call.body or {}
        if self.token_refused:
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if path.startswith("/attachments/"):
            data = self.files.get(path.removeprefix("/attachments/"))
            return web.Response(body=data) if data is not None else _error(404, 10003)
        if (method, path) == ("GET", "/gateway/bot") and self.gateway_bot_down > 0:
            self.gateway_bot_down -= 1
            return _json({"message": "503: Service Unavailable", "code": 0}, status=503)
        if (method, path) == ("GET", "/gateway/bot"):
            limit = {
                "total": 1000,
                "remaining": 1000,
                "reset_after": 0,
                "max_concurrency": self.max_concurrency,
            }
            shards, url = self.recommended_shards, self.bot_gateway_url or self.gateway_url
            return _json({"url": url, "shards": shards, "session_start_limit": limit})
        if (method, path) == ("GET", "/gateway"):
            return _json({"url": self.gateway_url})
        if (method, path) == ("GET", "/users/@me"):
            return _json(self.bot)
        if (method, path) == ("GET", "/oauth2/applications/@me"):
            return _json(self._application())
        if (method, path) == ("POST", "/users/@me/channels"):
            user_id = int(body["recipient_id"])
            channel_id = self.dm_channels.setdefault(user_id, snowflake())
            recipient = user(user_id, f"user{user_id}")
            return _json({"id": str(channel_id), "type": 1, "recipients": [recipient]})
        if match := re.fullmatch(r"/channels/(\d+)/typing", path):
            if self.typing_status != 204:
                return _error(self.typing_status, 50013, "Missing Permissions")
            return web.Response(status=204)
        if method == "GET" and (match := re.fullmatch(r"/channels/(\d+)/messages", path)):
            if int(match[1]) in self.history_refused:
                return _error(403, 50001, "Missing Access")
            return _json(self._read_back(int(match[1]), call.query))
        if method == "GET" and (match := re.fullmatch(r"/channels/(\d+)", path)):
            return self._channel(int(match[1]))
        if match := re.fullmatch(r"/channels/(\d+)/messages", path):
            channel_id = int(match[1])
            if any(self.dm_channels.get(u) == channel_id for u in self.closed_dms):
                return _error(403, 50007, "Cannot send messages to this user")
            return _json(self._message(channel_id, body))
        if match := re.fullmatch(r"/interactions/(\d+)/([^/]+)/callback", path):
            return _json(self._callback(int(match[1]), body))
        if re.fullmatch(r"/webhooks/\d+/[^/]+(/messages/@original)?", path):
            return _json(self._message(snowflake(), body))
        if method == "PATCH" and re.fullmatch(r"/guilds/(\d+)/members/@me", path):
            if self.nick_refused:
                return _error(403, 50013, "Missing Permissions")
            return _json(
                {**member(int(self.bot["id"]), self.bot["username"]), "nick": body.get("nick")}
            )
        if match := re.fullmatch(r"/applications/\d+/commands", path):
            commands = [self._command(c) for c in body] if method == "PUT" else []
            return _json(commands)
        return _error(404, 0, f"the fake has no route for {method} {path}")

    def _read_back(self, channel_id: int, query: dict[str, str]) -> list[dict[str, Any]]:
        after, limit = int(query.get("after", 0)), int(query.get("limit", 50))
        everything = self.history.get(channel_id, []) + self.posted.get(channel_id, [])
        posted = sorted(everything, key=lambda m: int(m["id"]))
        return [m for m in posted if int(m["id"]) > after][:limit][::-1]

    def _channel(self, channel_id: int) -> web.Response:
        if channel_id in self.channels:
            return _json(self.channels[channel_id])
        for user_id, dm in self.dm_channels.items():
            if dm == channel_id:
                recipient = user(user_id, f"user{user_id}")
                return _json({"id": str(channel_id), "type": 1, "recipients": [recipient]})
        return _error(404, 10003, "Unknown Channel")

    def _application(self) -> dict[str, Any]:
        return {
            "id": str(self.application_id),
            "name": self.bot["username"],
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": user(snowflake(), "owner"),
            "verify_key": "0" * 64,
            "flags": 0,
        }

    def _message(self, channel_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """The bot's post, kept for reading back: its id is a real snowflake of now (as
        Discord's are), so `after=<time>` finds it. With `enforce_nonce`, a nonce the bot
        already used in the channel returns that message and posts nothing (as Discord does
        for a few minutes)."""
        if body.get("enforce_nonce") and "nonce" in body:
            for earlier in self.posted.get(channel_id, []):
                if earlier.get("nonce") == body["nonce"]:
                    return earlier
        self._last_post = max(discord.utils.time_snowflake(datetime.now(UTC)), self._last_post + 1)
        content = body.get("content") or ""
        payload = message(self.bot, channel_id, content, message_id=self._last_post)
        payload["flags"] = body.get("flags", 0)
        if "nonce" in body:
            payload["nonce"] = body["nonce"]
        if "message_reference" in body:
            payload["message_reference"] = body["message_reference"]
        self.posted.setdefault(channel_id, []).append(payload)
        return payload

    def _callback(self, interaction_id: int, body: dict[str, Any]) -> dict[str, Any]:
        kind = body["type"]
        data = body.get("data") or {}
        answer: dict[str, Any] = {
            "interaction": {
                "id": str(interaction_id),
                "type": 2,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(data.get("flags", 0) & EPHEMERAL),
            }
        }
        if kind in (4, 5):  # a new message: the answer, or "thinking..."
            reply = message(self.bot, snowflake(), data.get("content") or "")
            reply["flags"] = data.get("flags", 0)
            reply["components"] = data.get("components", [])
            answer["interaction"]["response_message_id"] = reply["id"]
            self.shown[interaction_id] = reply
            answer["resource"] = {"type": kind, "message": reply}
        return answer

    def _command(self, command: dict[str, Any]) -> dict[str, Any]:
        return {
            **command,
            "id": str(snowflake()),
            "application_id": str(self.application_id),
            "version": "1",
        }

    async def __aenter__(self) -> FakeDiscord:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.root = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner:
            await self._runner.cleanup()


def _json(data: Any, status: int = 200) -> web.Response:
    """JSON as Discord sends it: discord.py wants exactly `application/json`, no charset."""
    body = json.dumps(data).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": "application/json"})


def _error(status: int, code: int, text: str = "Unknown") -> web.Response:
    return _json({"message": text, "code": code}, status=status)


# Gateway payloads


def user(user_id: int, name: str, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name.lower(),
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


def member(
    user_id: int, name: str, roles: list[int] | None = None, permissions: int | None = None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "user": user(user_id, name),
        "nick": None,
        "roles": [str(r) for r in roles or []],
        "joined_at": WHEN,
        "deaf": False,
        "mute": False,
        "flags": 0,
    }
    if permissions is not None:  # only in interactions: what Discord computed for the channel
        payload["permissions"] = str(permissions)
    return payload


def role(role_id: int, name: str, permissions: int = 0, bot_id: int | None = None) -> dict:
    payload: dict[str, Any] = {
        "id": str(role_id),
        "name": name,
        "color": 0,
        "hoist": False,
        "position": 0 if bot_id is None else 1,
        "permissions": str(permissions),
        "managed": bot_id is not None,
        "mentionable": False,
        "flags": 0,
    }
    if bot_id is not None:
        payload["tags"] = {"bot_id": str(bot_id)}
    return payload


def ready(bot: dict[str, Any], application_id: int, guild_ids: list[int]) -> dict[str, Any]:
    return {
        "v": 10,
        "user": bot,
        "guilds": [{"id": str(g), "unavailable": True} for g in guild_ids],
        "session_id": "fake-session",
        "resume_gateway_url": "wss://127.0.0.1/",
        "application": {"id": str(application_id), "flags": 0},
    }


def guild(
    guild_id: int,
    owner_id: int,
    channels: list[dict[str, Any]],
    threads: list[dict[str, Any]],
    members: list[dict[str, Any]],
    roles: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": str(guild_id),
        "name": "Harbour",
        "icon": None,
        "owner_id": str(owner_id),
        # Discord's default for everyone: view channels, send messages, read their history
        "roles": [role(guild_id, "@everyone", permissions=0x400 | 0x800 | 0x10000), *roles],
        "emojis": [],
        "stickers": [],
        "features": [],
        "channels": channels,
        "threads": threads,
        "members": members,
        "member_count": len(members),
        "presences": [],
        "voice_states": [],
        "large": False,
        "unavailable": False,
        "joined_at": WHEN,
        "mfa_level": 0,
        "verification_level": 0,
        "premium_tier": 0,
        "preferred_locale": "en-US",
    }


def text_channel(channel_id: int, guild_id: int, name: str) -> dict[str, Any]:
    return {
        "id": str(channel_id),
        "type": 0,
        "guild_id": str(guild_id),
        "name": name,
        "position": 0,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
    }


def thread(thread_id: int, guild_id: int, parent_id: int, owner_id: int) -> dict[str, Any]:
    return {
        "id": str(thread_id),
        "type": 11,
        "guild_id": str(guild_id),
        "parent_id": str(parent_id),
        "owner_id": str(owner_id),
        "name": "boat talk",
        "message_count": 1,
        "member_count": 2,
        "rate_limit_per_user": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": WHEN,
            "locked": False,
        },
    }


def message(
    author: dict[str, Any],
    channel_id: int,
    content: str,
    *,
    guild_id: int | None = None,
    author_member: dict[str, Any] | None = None,
    mentions: list[dict[str, Any]] | None = None,
    attachments: list[dict[str, Any]] | None = None,
    replying_to: dict[str, Any] | None = None,
    kind: int = 0,
    message_id: int | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": str(message_id or snowflake()),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": WHEN,
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": attachments or [],
        "embeds": [],
        "pinned": False,
        "type": kind,
        "flags": 0,
    }
    if guild_id is not None:
        payload["guild_id"] = str(guild_id)
        if author_member is not None:
            payload["member"] = {k: v for k, v in author_member.items() if k != "user"}
    if replying_to is not None:
        payload["type"] = 19
        payload["message_reference"] = {
            "type": 0,
            "message_id": replying_to["id"],
            "channel_id": replying_to["channel_id"],
            "guild_id": str(guild_id) if guild_id else None,
        }
        payload["referenced_message"] = replying_to
    return payload


def attachment(url: str, filename: str, size: int) -> dict[str, Any]:
    return {
        "id": str(snowflake()),
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": "application/octet-stream",
    }


def member_add(guild_id: int, joined: dict[str, Any]) -> dict[str, Any]:
    return {**joined, "guild_id": str(guild_id)}


def _interaction(
    application_id: int,
    kind: int,
    data: dict[str, Any],
    who: dict[str, Any],
    guild_id: int | None,
    channel_id: int,
) -> dict[str, Any]:
    interaction_id = snowflake()
    payload: dict[str, Any] = {
        "id": str(interaction_id),
        "application_id": str(application_id),
        "type": kind,
        "data": data,
        "token": f"token-{interaction_id}",
        "version": 1,
        "locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
        "attachment_size_limit": 10 * 1024 * 1024,
        "channel_id": str(channel_id),
    }
    if guild_id is not None:
        payload.update(guild_id=str(guild_id), member=who, context=0, guild_locale="en-US")
        payload["channel"] = text_channel(channel_id, guild_id, "general")
        payload["authorizing_integration_owners"] = {"0": str(guild_id)}
    else:
        payload.update(user=who, context=1)
        payload["channel"] = {"id": str(channel_id), "type": 1}
        payload["authorizing_integration_owners"] = {"0": who["id"]}
    return payload


def command(
    application_id: int,
    who: dict[str, Any],
    name: str,
    options: list[dict[str, Any]],
    *,
    guild_id: int | None,
    channel_id: int,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An APPLICATION_COMMAND interaction; `who` is a member (in a server) or a user (DM)."""
    data: dict[str, Any] = {"id": str(snowflake()), "name": name, "type": 1, "options": options}
    if resolved:
        data["resolved"] = resolved
    return _interaction(application_id, 2, data, who, guild_id, channel_id)


def subcommand(name: str, /, **values: tuple[int, Any]) -> dict[str, Any]:
    """A subcommand option; `values` maps option name -> (option type, value)."""
    options = [{"name": k, "type": t, "value": v} for k, (t, v) in values.items()]
    return {"name": name, "type": 1, "options": options}


def button_click(
    application_id: int,
    who: dict[str, Any],
    shown: dict[str, Any],
    custom_id: str,
    *,
    guild_id: int | None,
    channel_id: int,
) -> dict[str, Any]:
    """A MESSAGE_COMPONENT interaction: `who` pressed the button `custom_id` on `shown`."""
    data = {"custom_id": custom_id, "component_type": 2}
    payload = _interaction(application_id, 3, data, who, guild_id, channel_id)
    payload["message"] = shown
    return payload
