"""Several `companion run` processes in Slack HTTP mode behind one round-robin proxy.

Used by tests/test_replicas.py (a small run) and bench/replicas.py (1,000 events from 100
members). `Replicas` starts N processes on one database and FakeSlack, each on its own port,
and a `RoundRobin` proxy in front of them that sends each request to the next process; a
process that does not answer (killed) is skipped, as a load balancer's health check would,
and when none answers Slack gets a 502. `Member.talk` plays Slack for one member: each of
their messages is posted (signed, as Slack does) until a process acknowledges it with 200,
retried otherwise with `X-Slack-Retry-Num`, and the next message goes only once the previous
one was acknowledged. What the member sees is FakeSlack's chat.postMessage calls in their DM.

Each life of each process has a bot token of its own (all of one workspace), so FakeSlack's
record says which process posted what: were a reply posted by a process killed before it
could mark it sent posted again by whoever finishes the job, `outcome` would count the second
copy (and say whether the first came from a killed process).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from adapters.common import SORRY
from tests.conftest import COMPANION
from tests.fake_slack import TEAM, FakeSlack, signed
from tests.rigs import slack_envelope

SECRET = "replica-secret"
FORWARDED = {"content-type", "x-slack-signature", "x-slack-request-timestamp", "x-slack-retry-num"}


class RoundRobin:
    """A local HTTP proxy: each request to the next backend that answers."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.ports = list(ports)
        self._next = itertools.count()
        self.sent: list[int] = []  # the backend port of each forwarded request
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self.url = ""

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._http is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        start = next(self._next)
        for offset in range(len(self.ports)):
            port = self.ports[(start + offset) % len(self.ports)]
            try:
                url = f"http://127.0.0.1:{port}{request.path_qs}"
                async with self._http.post(url, data=body, headers=headers) as answer:
                    self.sent.append(port)
                    return web.Response(status=answer.status, body=await answer.read())
            except (TimeoutError, aiohttp.ClientConnectionError):
                continue  # down: the next one
        return web.Response(status=502)

    async def __aenter__(self) -> RoundRobin:
        timeout = aiohttp.ClientTimeout(total=30)
        self._http = aiohttp.ClientSession(timeout=timeout)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner:
            await self._runner.cleanup()
        if self._http:
            await self._http.close()


@dataclass
class Replicas:
    """N `companion run` processes, same database, same FakeSlack, ports given."""

    env: dict[str, str]  # cli_env of the database, without the Slack and HTTP settings
    api: FakeSlack
    ports: list[int]
    procs: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    logs: dict[int, list[bytes]] = field(default_factory=dict)
    tokens: dict[int, str] = field(default_factory=dict)  # port -> the token of its life
    killed: list[str] = field(default_factory=list)  # tokens of the lives killed

    async def start(self, port: int) -> None:
        token = f"xoxb-{port}-{len(self.api.teams)}"
        self.api.teams[token] = TEAM  # one workspace, a token per process life
        self.tokens[port] = token
        env = {
            **self.env,
            "SLACK_BOT_TOKEN": token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.api.base_url,
            "COMPANION_HTTP_HOST": "127.0.0.1",
            "COMPANION_HTTP_PORT": str(port),
            "COMPANION_RATE_LIMIT": "off",
        }
        proc = await asyncio.create_subprocess_exec(
            *COMPANION, "run", env=env, stderr=asyncio.subprocess.PIPE
        )
        self.procs[port] = proc
        self.logs.setdefault(port, [])
        assert proc.stderr is not None
        asyncio.get_running_loop().create_task(self._drain(port, proc.stderr))
        await self.until_ready(port)

    async def _drain(self, port: int, stream: asyncio.StreamReader) -> None:
        async for line in stream:  # keep the pipe empty, keep the lines for a failure
            self.logs[port].append(line)

    async def until_ready(self, port: int, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as answer:
                        if answer.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"replica on {port} never got ready: {self.log(port)}")

    def kill(self, port: int) -> None:
        """SIGKILL: no grace, no clean-up, as when a node dies."""
        self.procs[port].kill()
        self.killed.append(self.tokens[port])

    async def stop_all(self) -> dict[int, int]:
        codes = {}
        for port, proc in self.procs.items():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            codes[port] = await asyncio.wait_for(proc.wait(), 60)
        return codes

    def log(self, port: int) -> str:
        return b"".join(self.logs.get(port, [])).decode(errors="replace")[-4000:]


@dataclass
class Member:
    user: str
    said: list[str]
    acknowledged: list[str] = field(default_factory=list)
    retries: int = 0

    async def talk(self, http: aiohttp.ClientSession, url: str, before: asyncio.Event) -> None:
        for number, words in enumerate(self.said):
            await before.wait()  # paused while the test kills or restarts a process
            ts = f"1700000000.{number:06d}"  # Slack's id of the message, in its channel
            event = {
                "type": "message",
                "channel": f"D{self.user}",
                "user": self.user,
                "text": words,
                "ts": ts,
                "event_ts": ts,
                "channel_type": "im",
            }
            body = json.dumps(slack_envelope(event))
            await self._deliver(http, url, body)
            self.acknowledged.append(words)

    async def _deliver(self, http: aiohttp.ClientSession, url: str, body: str) -> None:
        """Post until acknowledged, as Slack retries an event (with X-Slack-Retry-Num)."""
        last: object = None
        for attempt in range(30):
            headers = signed(body, SECRET)
            if attempt:
                headers["X-Slack-Retry-Num"] = str(attempt)
                headers["X-Slack-Retry-Reason"] = "http_error"
            try:
                async with http.post(url, data=body, headers=headers) as answer:
                    if answer.status == 200:
                        return
                    last = (answer.status, await answer.text())
            except aiohttp.ClientError as error:
                last = error
            self.retries += 1
            await asyncio.sleep(0.2 * min(attempt + 1, 5))
        raise AssertionError(f"{self.user}: an event was never acknowledged (last: {last})")

    def seen(self, api: FakeSlack) -> list[str]:
        """What the member saw in their DM, in order."""
        return [text for text, _ in self.posts(api)]

    def posts(self, api: FakeSlack) -> list[tuple[str, str | None]]:
        """(text, token of the process that posted it) in the member's DM, in order."""
        posts = zip(api.called("chat.postMessage"), api.token_of("chat.postMessage"), strict=True)
        return [(p["text"], token) for p, token in posts if p.get("channel") == f"D{self.user}"]

    def first_posters(self, api: FakeSlack) -> dict[str, str | None]:
        """Each text's first poster (a process's token)."""
        found: dict[str, str | None] = {}
        for text, token in self.posts(api):
            found.setdefault(text, token)
        return found


async def until_acknowledged(
    people: Sequence[Member], count: int, talking: Sequence[asyncio.Task[None]], seconds: float
) -> None:
    """Wait until `count` events were acknowledged; a member that gave up fails it."""
    deadline = time.monotonic() + seconds
    while sum(len(m.acknowledged) for m in people) < count:
        for task in talking:
            if task.done() and task.exception():
                raise task.exception()  # type: ignore[misc]
        if time.monotonic() > deadline:
            raise AssertionError(f"only {sum(len(m.acknowledged) for m in people)} acknowledged")
        await asyncio.sleep(0.05)


def members(count: int, each: int) -> list[Member]:
    """`count` members with `each` messages; the first asks to remember something (an
    opener needs a fact to build on)."""
    found = []
    for m in range(count):
        user = f"U{m:04d}"
        said = [f"remember that I am member {m}"] + [f"{user} says {k}" for k in range(1, each)]
        found.append(Member(user, said))
    return found


def expected(member: Member) -> list[str]:
    """The answers the default brain gives, in the member's order."""
    return ["Got it, I'll remember that."] + [f"You said: {w}" for w in member.said[1:]]


async def wait_for_answers(api: FakeSlack, people: Sequence[Member], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    total = sum(len(m.said) for m in people)
    while time.monotonic() < deadline:
        if len(api.called("chat.postMessage")) >= total:
            await asyncio.sleep(2)  # a duplicate, were there one, would be in by now
            return True
        await asyncio.sleep(0.25)
    return False


def outcome(api: FakeSlack, people: Sequence[Member], killed: Sequence[str]) -> dict[str, Any]:
    """Counts of what members saw: missing, duplicated (a second copy of a post the killed
    process made, or any other), out of order (first copies), unexpected."""
    missing = duplicated = disordered = 0
    sample: list[str] = []
    doubles: list[str] = []
    unexpected: list[str] = []
    apologies = 0
    for member in people:
        everything, want = member.seen(api), expected(member)
        apologies += everything.count(SORRY)  # a failure after the acknowledgement
        seen = [s for s in everything if s != SORRY]
        first_by = member.first_posters(api)
        for text in {s for s in seen if seen.count(s) > 1}:
            kind = "after a kill" if first_by[text] in killed else "OTHER"
            doubles.append(f"{member.user}: {text} ({kind})")
        unexpected += [f"{member.user}: {s}" for s in seen if s not in want]
        missing += sum(1 for w in set(want) if w not in seen)
        duplicated += len(seen) - len(set(seen))
        firsts = list(dict.fromkeys(s for s in seen if s in want))
        if firsts != [w for w in want if w in seen]:
            disordered += 1
            sample = sample or seen
    return {
        "events": sum(len(m.said) for m in people),
        "acknowledged": sum(len(m.acknowledged) for m in people),
        "answers": len(api.called("chat.postMessage")),
        "missing": missing,
        "duplicated": duplicated,
        "duplicated, not after a kill": sum(1 for d in doubles if d.endswith("(OTHER)")),
        "members out of order": disordered,
        "apologies": apologies,
        "retried posts": sum(m.retries for m in people),
        "first out of order": sample,
        "duplicates": doubles,
        "unexpected": unexpected,
    }
