"""Discord for the chaos campaign: the REST fake with faults and history, and a gateway.

ChaosDiscord   tests.fake_discord.FakeDiscord plus what a bot process running for real
               needs: channel history (GET /channels/{id}/messages), channels and users
               by id (for retried replies and openers over REST), and faults (latency,
               500s, 429s) drawn from a seeded `Faults`. Failed calls are not recorded
               as calls: only what Discord accepted counts as shown to the member.
Gateway        a websocket speaking Discord's gateway protocol to discord.py: HELLO (op
               10), IDENTIFY (op 2) -> READY and GUILD_CREATE, heartbeats (op 1 / 11),
               RESUME (op 6) replaying what the session missed, RECONNECT (op 7). A
               member's post goes into the channel's history always, and to the bot only
               when a session is live: `post` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.chaos.faults import Faults
from tests.fake_discord import (
    FakeDiscord,
    _error,
    _json,
    guild,
    member,
    ready,
    role,
    text_channel,
    user,
)
from tests.fake_discord import (
    message as message_payload,
)

HEARTBEAT_MS = 5000


class ChaosDiscord(FakeDiscord):
    def __init__(self, bot: dict[str, Any], application_id: int, faults: Faults) -> None:
        super().__init__(bot, application_id)
        self.faults = faults
        self.history: dict[int, list[dict[str, Any]]] = {}  # channel id -> messages, oldest first
        self.channels: dict[int, dict[str, Any]] = {}  # channel id -> channel object
        self.users: dict[int, dict[str, Any]] = {}
        self.failed: list[tuple[str, str, int]] = []  # (method, path, status) refused by chaos

    def add_history(self, payload: dict[str, Any]) -> None:
        channel_id = int(payload["channel_id"])
        self.history.setdefault(channel_id, []).append(payload)
        channel = self.channels.get(channel_id)
        if channel is not None and "guild_id" in channel:  # as the next GUILD_CREATE shows it
            channel["last_message_id"] = payload["id"]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.removeprefix("/api/v10")
        if request.method == "POST" and re.fullmatch(r"/channels/\d+/messages", path):
            failure = await self.faults.platform_call("discord.send")
            if failure is not None:
                self.failed.append((request.method, path, failure))
                if failure == 429:
                    body = {"message": "rate limited", "retry_after": 0.05, "global": False}
                    answer = _json(body, status=429)
                    answer.headers["Via"] = "1.1 google"  # else discord.py takes it for a ban
                    return answer
                return _error(failure, 0, "chaos")
        return await super()._handle(request)

    def _answer(self, call: Any) -> web.StreamResponse:
        method, path = call.method, call.path
        if method == "GET" and (match := re.fullmatch(r"/channels/(\d+)/messages", path)):
            return _json(self._history(int(match[1]), call))
        if method == "GET" and (match := re.fullmatch(r"/channels/(\d+)", path)):
            channel = self.channels.get(int(match[1]))
            return _json(channel) if channel else _error(404, 10003, "Unknown Channel")
        if method == "GET" and (match := re.fullmatch(r"/users/(\d+)", path)):
            found = self.users.get(int(match[1]))
            return _json(found) if found else _error(404, 10013, "Unknown User")
        return super()._answer(call)

    def _message(self, channel_id: int, body: dict[str, Any]) -> dict[str, Any]:
        payload = super()._message(channel_id, body)
        self.add_history(payload)
        return payload

    def _history(self, channel_id: int, call: Any) -> list[dict[str, Any]]:
        """Newest first, as Discord answers; `after`, `before` and `limit` as documented."""
        query = getattr(call, "query", {}) or {}
        found = list(self.history.get(channel_id, []))
        if "after" in query:
            found = [m for m in found if int(m["id"]) > int(query["after"])]
        if "before" in query:
            found = [m for m in found if int(m["id"]) < int(query["before"])]
        found.sort(key=lambda m: int(m["id"]))
        limit = min(int(query.get("limit", 50)), 100)
        if "after" in query:
            return list(reversed(found[:limit]))
        return list(reversed(found[-limit:]))

    async def _record(self, request: web.Request) -> Any:
        call = await super()._record(request)
        call.query = dict(request.query)  # type: ignore[attr-defined]
        return call


@dataclass
class Session:
    session_id: str
    sent: list[dict[str, Any]] = field(default_factory=list)  # every dispatch, with its seq
    ws: web.WebSocketResponse | None = None

    @property
    def seq(self) -> int:
        return len(self.sent)


@dataclass
class World:
    """The guilds, channels and members the gateway announces."""

    bot: dict[str, Any]
    application_id: int
    bot_role: int
    guilds: dict[int, dict[str, Any]] = field(default_factory=dict)  # guild id -> GUILD_CREATE

    def add_guild(self, guild_id: int, owner_id: int) -> None:
        self.guilds[guild_id] = guild(
            guild_id,
            owner_id,
            channels=[],
            threads=[],
            members=[member(int(self.bot["id"]), "Companion", roles=[self.bot_role])],
            roles=[role(self.bot_role, "Companion", bot_id=int(self.bot["id"]))],
        )

    def add_channel(self, guild_id: int, channel_id: int, name: str) -> dict[str, Any]:
        channel = text_channel(channel_id, guild_id, name)
        self.guilds[guild_id]["channels"].append(channel)
        return channel

    def add_member(self, guild_id: int, user_id: int, name: str) -> None:
        entry = self.guilds[guild_id]
        entry["members"].append(member(user_id, name))
        entry["member_count"] = len(entry["members"])


class Gateway:
    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        self.sessions: dict[str, Session] = {}
        self._connected = asyncio.Event()
        self._live: Session | None = None
        self.identifies = 0
        self.resumes = 0
        self.log: list[tuple[float, str]] = []  # (time.monotonic(), what happened)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # What the campaign does

    async def post(self, payload: dict[str, Any]) -> bool:
        """Dispatch MESSAGE_CREATE to the live session; False when no bot is connected."""
        session = self.live
        if session is None or not self._is_live():
            return False
        await self._dispatch(session, "MESSAGE_CREATE", payload)
        return True

    async def interact(self, payload: dict[str, Any]) -> bool:
        """Dispatch INTERACTION_CREATE (a slash command) to the live session, if any."""
        session = self.live
        if session is None or not self._is_live():
            return False
        await self._dispatch(session, "INTERACTION_CREATE", payload)
        return True

    async def wait_live(self, until: float) -> None:
        """Until a bot session is live (or time.monotonic() passes `until`)."""
        left = until - time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(None if left == float("inf") else max(left, 0.0)):
                await self._connected.wait()

    @property
    def live(self) -> Session | None:
        return self._live

    @live.setter
    def live(self, session: Session | None) -> None:
        self._live = session
        if session is None:
            self._connected.clear()
        else:
            self._connected.set()

    def _is_live(self) -> bool:
        session = self.live
        return session is not None and session.ws is not None and not session.ws.closed

    async def drop(self) -> None:
        """Close the live socket as a network failure would (code 4000: the bot resumes)."""
        session = self.live
        if session and session.ws and not session.ws.closed:
            self.live = None
            await session.ws.close(code=4000)

    async def ask_reconnect(self) -> None:
        """Op 7 RECONNECT: Discord asks the bot to reconnect and resume."""
        session = self.live
        if session and session.ws and not session.ws.closed:
            await session.ws.send_json({"op": 7, "d": None})

    # The protocol

    async def _dispatch(self, session: Session, kind: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": kind, "s": session.seq + 1, "d": data}
        session.sent.append(frame)
        ws = session.ws
        if ws is not None and not ws.closed:
            try:
                await ws.send_str(json.dumps(frame))
            except (ConnectionError, RuntimeError):
                pass  # the socket died under us: the frame stays for a RESUME

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}})
        session: Session | None = None
        async for raw in ws:
            if raw.type != WSMsgType.TEXT:
                continue
            frame = json.loads(raw.data)
            op, data = frame.get("op"), frame.get("d")
            if op == 1:
                await ws.send_json({"op": 11})
            elif op == 2:
                session = await self._identify(ws)
            elif op == 6:
                session = await self._resume(ws, data or {})
        if session is not None and self.live is session:
            self.live = None
        self.log.append((time.monotonic(), f"closed {session.session_id if session else '-'}"))
        return ws

    async def _identify(self, ws: web.WebSocketResponse) -> Session:
        self.identifies += 1
        self.log.append((time.monotonic(), "identify"))
        session = Session(f"chaos-session-{next(self._ids)}", ws=ws)
        self.sessions[session.session_id] = session
        world = self.world
        payload = ready(world.bot, world.application_id, list(world.guilds))
        payload["session_id"] = session.session_id
        payload["resume_gateway_url"] = self.url
        await self._dispatch(session, "READY", payload)
        for entry in world.guilds.values():
            await self._dispatch(session, "GUILD_CREATE", entry)
        self.live = session
        return session

    async def _resume(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> Session | None:
        session = self.sessions.get(str(data.get("session_id")))
        if session is None:
            await ws.send_json({"op": 9, "d": False})  # invalid session: identify afresh
            return None
        self.resumes += 1
        self.log.append((time.monotonic(), "resume"))
        old = session.ws
        session.ws = ws
        if old is not None and old is not ws and not old.closed:
            await old.close(code=4000)
        seen = int(data.get("seq") or 0)
        for frame in session.sent[seen:]:
            await ws.send_str(json.dumps(frame))
        await self._dispatch(session, "RESUMED", {})
        self.live = session
        return session

    async def __aenter__(self) -> Gateway:
        app = web.Application()
        app.router.add_get("/", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in self.sessions.values():
            if session.ws is not None and not session.ws.closed:
                await session.ws.close()
        if self._runner:
            await self._runner.cleanup()


def member_message(
    author: dict[str, Any],
    channel_id: int,
    content: str,
    *,
    guild_id: int | None,
    bot: dict[str, Any],
    attachments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A member's MESSAGE_CREATE: in a server it mentions the bot, in a DM it needn't."""
    if guild_id is None:
        return message_payload(author, channel_id, content, attachments=attachments)
    return message_payload(
        author,
        channel_id,
        f"<@{bot['id']}> {content}",
        guild_id=guild_id,
        author_member=member(int(author["id"]), author["global_name"]),
        mentions=[bot],
        attachments=attachments,
    )


def dm_channel(channel_id: int, recipient: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(channel_id), "type": 1, "recipients": [recipient]}


__all__ = ["ChaosDiscord", "Gateway", "World", "dm_channel", "member_message", "user"]
