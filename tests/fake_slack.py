"""A local stand-in for Slack's Web API (as bolt-python's own tests use a mock server).

The real `AsyncWebClient` talks to it through `base_url`; every call is recorded as
(method, arguments). `latency` delays every Web API answer (seconds), as the real API
takes its time; `fail_methods` makes a method fail every time, `fail_once` the next N times;
`on_call(method, args)`, when set, runs as each call arrives (to look at the world just then).
Socket Mode: `apps.connections.open` hands out a WebSocket on this server; `push(envelope)`
sends an envelope down it, and `acks` holds what the app answered (with `on_ack(ack)`, when
set, run as each answer arrives).
It also serves file downloads (`url_private_download`; one named in `broken` drops the
connection), takes file uploads (files_upload_v2) and response_url posts.
`signed(body, secret)` builds the headers Slack would send with an Events API or
slash-command request. `settle()` waits for
the work the app runs after acknowledging a request (the turn, the answer, a command's work).

Workspaces and tokens: every call is recorded with the bot token it carried (`token_of`).
`xoxb-test` is the token of workspace TEAM. For the OAuth install flow, `grant(team)` is
what Slack does when someone approves the install: it returns the code that
`oauth.v2.access` (checked against CLIENT_ID / CLIENT_SECRET and the redirect URI) turns
into a new bot token of that workspace, a rotating one with `expires_in`. A rotating token
past its time answers `token_expired`, and `oauth.v2.access` with grant_type=refresh_token
gives the next one. `auth.test` answers for the workspace of the token it was called with.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

BOT_USER = "UBOT"
TEAM = "T0001"
CLIENT_ID = "1111.2222"
CLIENT_SECRET = "client-secret"


def signed(body: str, secret: str, timestamp: int | None = None) -> dict[str, str]:
    ts = str(timestamp or int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "x-slack-request-timestamp": ts,
        "x-slack-signature": f"v0={digest}",
        "content-type": "application/json",
    }


BACKGROUND = "companion: "  # how the engine names work it runs after an acknowledgement


async def settle(within: float = 30.0) -> None:
    """Wait until the work Bolt's listeners left running after the acknowledgement is done."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while pending := [
        t for t in asyncio.all_tasks() if t.get_name().startswith(BACKGROUND) and not t.done()
    ]:
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"still running: {pending}")
        await asyncio.wait(pending, timeout=left)


class FakeSlack:
    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.on_call: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None
        self.on_ack: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        self.acks: list[dict[str, Any]] = []
        self._socket: web.WebSocketResponse | None = None
        self._socket_open = asyncio.Event()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.files: dict[str, bytes] = {}
        self.broken: set[str] = set()  # files whose download breaks off mid-way
        self.uploads: dict[str, bytes] = {}
        self.responses: list[dict[str, Any]] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.fail_methods: dict[str, str] = {}
        self.failures: dict[str, list[str]] = {}
        self._runner: web.AppRunner | None = None
        self.root = ""
        self._ts = 1000
        self._clock_ts = 0.0  # the last posted message's ts: Slack's are times, unique per channel
        self.posted: dict[str, list[dict[str, Any]]] = {}  # channel -> messages, oldest first
        self.tokens: list[str | None] = []  # the bot token of each call in `calls`
        self.teams: dict[str, str] = {"xoxb-test": TEAM}  # bot token -> its workspace
        self.expiry: dict[str, float] = {}  # rotating token -> when it stops working
        self.refresh: dict[str, str] = {}  # refresh token -> its workspace
        self.codes: dict[str, tuple[str, int | None]] = {}  # code -> workspace, expires_in
        self.redirect_uri: str | None = None  # what oauth.v2.access must be sent, when set
        self._minted = 0
        self.rotation_seconds = 43200  # the lifetime of a refreshed token

    @property
    def base_url(self) -> str:
        return f"{self.root}/api/"

    def called(self, method: str) -> list[dict[str, Any]]:
        return [args for name, args in self.calls if name == method]

    def token_of(self, method: str) -> list[str | None]:
        """The bot token each call of `method` carried, in order."""
        return [t for (name, _), t in zip(self.calls, self.tokens, strict=True) if name == method]

    def grant(self, team: str, expires_in: int | None = None) -> str:
        """Someone approved the install in `team`: the code Slack sends to the redirect URI.
        With `expires_in`, the workspace gets rotating tokens (token rotation on)."""
        code = f"code-{team}-{len(self.codes)}"
        self.codes[code] = (team, expires_in)
        return code

    def _mint(self, team: str, expires_in: int | None) -> dict[str, Any]:
        self._minted += 1
        token = f"xoxb-{team}-{self._minted}"
        self.teams[token] = team
        answer: dict[str, Any] = {
            "access_token": token,
            "token_type": "bot",
            "scope": "chat:write,im:history",
            "bot_user_id": f"UBOT{team}",
            "app_id": "A1",
            "team": {"id": team, "name": f"Workspace {team}"},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": f"UINSTALLER{team}"},
        }
        if expires_in is not None:
            refresh = f"xoxe-1-{team}-{self._minted}"
            self.expiry[token] = time.time() + expires_in
            self.refresh[refresh] = team
            answer.update(expires_in=expires_in, refresh_token=refresh)
        return answer

    def _oauth(self, request: web.Request, args: dict[str, Any]) -> dict[str, Any]:
        basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if request.headers.get("Authorization") != f"Basic {basic}":
            return {"ok": False, "error": "invalid_client_id"}
        if args.get("grant_type") == "refresh_token":
            team = self.refresh.get(args.get("refresh_token", ""))
            if team is None:
                return {"ok": False, "error": "invalid_refresh_token"}
            return {"ok": True, **self._mint(team, self.rotation_seconds)}
        found = self.codes.pop(args.get("code", ""), None)
        if found is None:
            return {"ok": False, "error": "invalid_code"}
        if self.redirect_uri and args.get("redirect_uri") != self.redirect_uri:
            return {"ok": False, "error": "bad_redirect_uri"}
        return {"ok": True, **self._mint(*found)}

    def fail_once(self, method: str, error: str, times: int = 1) -> None:
        """The next `times` calls of `method` answer `{"ok": false, "error": error}`."""
        self.failures.setdefault(method, []).extend([error] * times)

    def add_user(self, user: str, admin: bool = False, tz: str = "Europe/Berlin") -> None:
        self.users[user] = {
            "id": user,
            "name": user.lower(),
            "real_name": f"User {user}",
            "is_admin": admin,
            "is_owner": False,
            "tz": tz,
            "is_bot": False,
        }

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.method == "GET":
            args = {}
        elif request.content_type == "application/json":
            args = await request.json()
        else:
            args = dict(parse_qsl(await request.text()))
        args = {**dict(request.query), **args}
        bearer = request.headers.get("Authorization", "")
        token = bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None
        self.calls.append((method, args))
        self.tokens.append(token)
        if self.on_call is not None:
            await self.on_call(method, args)
        if self.latency:
            await asyncio.sleep(self.latency)
        if method == "oauth.v2.access":
            return web.json_response(self._oauth(request, args))
        if token in self.expiry and self.expiry[token] < time.time():
            return web.json_response({"ok": False, "error": "token_expired"})
        if self.failures.get(method):
            return web.json_response({"ok": False, "error": self.failures[method].pop(0)})
        if method in self.fail_methods:
            return web.json_response({"ok": False, "error": self.fail_methods[method]})
        return web.json_response({"ok": True, **self._answer(method, args, token)})

    def _answer(self, method: str, args: dict[str, Any], token: str | None) -> dict[str, Any]:
        self._ts += 1
        if method == "auth.test":
            team = self.teams.get(token or "", TEAM)
            if team == TEAM:
                return {"user_id": BOT_USER, "bot_id": "BBOT", "team_id": TEAM, "user": "companion"}
            return {"user_id": f"UBOT{team}", "bot_id": f"BBOT{team}", "team_id": team}
        if method == "users.info":
            user = self.users.get(args.get("user", ""))
            return {"user": user} if user else {"ok": False, "error": "user_not_found"}
        if method == "apps.connections.open":
            return {"url": f"ws{self.root.removeprefix('http')}/socket"}
        if method == "conversations.open":
            return {"channel": {"id": f"D{args.get('users', 'X')}"}}
        if method == "chat.postMessage":
            return self._post(args)
        if method in ("conversations.history", "conversations.replies"):
            return {"messages": self._read_back(method, args), "has_more": False}
        if method == "files.getUploadURLExternal":
            file_id = f"F{self._ts}"
            return {"upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            files = json.loads(args.get("files", "[]"))
            return {"files": [{"id": f["id"], "title": f.get("title")} for f in files]}
        return {}

    def _post(self, args: dict[str, Any]) -> dict[str, Any]:
        self._clock_ts = max(time.time(), self._clock_ts + 0.000001)
        message: dict[str, Any] = {"type": "message", "user": BOT_USER, "text": args.get("text")}
        message["ts"] = f"{self._clock_ts:.6f}"
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        metadata = args.get("metadata")
        if metadata:
            message["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        self.posted.setdefault(args.get("channel") or "", []).append(message)
        return {"channel": args.get("channel"), "ts": message["ts"]}

    def _read_back(self, method: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """What conversations.history (top-level messages) or .replies (one thread) gives:
        newest first, from `oldest` on, metadata only with include_all_metadata."""
        oldest = float(args.get("oldest") or 0)
        posted = self.posted.get(args.get("channel") or "", [])
        if method == "conversations.replies":
            posted = [m for m in posted if m.get("thread_ts") == args.get("ts")]
        else:
            posted = [m for m in posted if not m.get("thread_ts")]
        with_metadata = str(args.get("include_all_metadata")).lower() in ("true", "1")
        found = [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
            for m in posted
            if float(m["ts"]) > oldest
        ]
        return found[::-1][: int(args.get("limit") or 100)]

    async def _socket_mode(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json({"type": "hello", "num_connections": 1})
        self._socket = socket
        self._socket_open.set()
        async for frame in socket:
            ack = json.loads(frame.data)
            if self.on_ack is not None:
                await self.on_ack(ack)
            self.acks.append(ack)
        return socket

    async def push(self, envelope: dict[str, Any]) -> None:
        """Send an envelope to the app connected in Socket Mode (waiting for it to connect)."""
        await asyncio.wait_for(self._socket_open.wait(), 30)
        assert self._socket is not None
        await self._socket.send_json(envelope)

    async def _download(self, request: web.Request) -> web.Response:
        self.calls.append(("download", {"auth": request.headers.get("Authorization", "")}))
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if bearer not in self.teams:
            return web.Response(status=403)
        if request.match_info["name"] in self.broken:
            assert request.transport is not None
            request.transport.close()  # the connection drops: no answer at all
        return web.Response(body=self.files[request.match_info["name"]])

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        return web.Response(text="OK")

    async def _respond(self, request: web.Request) -> web.Response:
        self.responses.append(await request.json())
        return web.Response(text="ok")

    async def __aenter__(self) -> FakeSlack:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_get("/files/{name}", self._download)
        app.router.add_get("/socket", self._socket_mode)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/respond/{id}", self._respond)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.root = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._runner:
            await self._runner.cleanup()
