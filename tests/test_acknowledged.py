"""Nothing Slack was told "received" is lost: `companion run` in HTTP mode, killed at random.

A stand-in for Slack's Events API posts members' DMs to the real `companion run` process
over HTTP, a few at a time, the way Slack does: an event that does not get HTTP 200
(connection refused or reset, a 5xx) is sent again with `X-Slack-Retry-Num`; one that got
200 is never sent again. The fake Web API answers every call after 150 ms, as Slack's own
takes its time. The process is SIGKILLed at seeded random moments while events arrive, then
started again. At the end every event that got a 200 is stored exactly once and answered.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections import Counter
from dataclasses import dataclass

import aiohttp
import pytest
from sqlalchemy import func, select

from core.models import Event
from tests.conftest import COMPANION, ROOT
from tests.fake_slack import BOT_USER, TEAM, FakeSlack, signed
from tests.test_run import free_port, slack_http_env

SEED = 8
MEMBERS = 6
MESSAGES = 36
KILLS = 3
ARRIVALS = 0.1  # seconds between two members' messages
IN_FLIGHT = 4  # events Slack has on the wire at once
LATENCY = 0.15  # seconds per Slack Web API call
TIMEOUT = 60  # seconds for everything to be answered once the last process runs


@dataclass(frozen=True)
class Dm:
    user: str
    ts: str
    text: str

    @property
    def channel(self) -> str:
        return f"D{self.user}"

    @property
    def dedup_key(self) -> str:
        return f"slack:msg:{self.channel}:{self.ts}"

    def body(self, number: int) -> str:
        event = {
            "type": "message",
            "channel": self.channel,
            "user": self.user,
            "text": self.text,
            "ts": self.ts,
            "channel_type": "im",
        }
        return json.dumps(
            {
                "team_id": TEAM,
                "event": event,
                "type": "event_callback",
                "event_id": f"Ev{number}",
                "api_app_id": "A1",
                "authorizations": [{"team_id": TEAM, "user_id": BOT_USER}],
            }
        )


class EventsApi:
    """Slack's side of the Events API: send, and send again until acknowledged."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.queue: asyncio.Queue[tuple[int, Dm]] = asyncio.Queue()
        self.acked: list[Dm] = []
        self.attempts: Counter[str] = Counter()

    async def members_write(self, dms: list[Dm]) -> None:
        for number, dm in enumerate(dms):
            self.queue.put_nowait((number, dm))
            await asyncio.sleep(ARRIVALS)

    async def worker(self, http: aiohttp.ClientSession) -> None:
        while True:
            number, dm = await self.queue.get()
            body = dm.body(number)
            headers = signed(body, "secret")
            if self.attempts[dm.ts]:
                headers["x-slack-retry-num"] = str(self.attempts[dm.ts])
                headers["x-slack-retry-reason"] = "http_error"
            self.attempts[dm.ts] += 1
            try:
                async with http.post(self.url, data=body, headers=headers) as response:
                    status = response.status
            except aiohttp.ClientError:
                status = 0
            if status == 200:
                self.acked.append(dm)
            else:
                await asyncio.sleep(0.05)
                self.queue.put_nowait((number, dm))
            self.queue.task_done()


class Companion:
    """`companion run` in Slack HTTP mode, started, killed and stopped as an operator would."""

    def __init__(self, env: dict, http: aiohttp.ClientSession, port: int) -> None:
        self.env, self.http, self.port = env, http, port
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *COMPANION,
            "run",
            env=self.env,
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(1200):
            try:
                async with self.http.get(f"http://127.0.0.1:{self.port}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError("companion run never listened")

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await self.proc.wait()

    async def stop(self) -> str:
        """SIGTERM; returns stderr once it exited (with status 0)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(self.proc.communicate(), 60)
        assert self.proc.returncode == 0, err.decode()[-3000:]
        return err.decode()

    async def cleanup(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await self.kill()


async def until(predicate, seconds: float) -> bool:
    for _ in range(int(seconds * 20)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


def answered(api: FakeSlack, dm: Dm) -> bool:
    return any(
        post.get("channel") == dm.channel and post.get("text") == f"You said: {dm.text}"
        for post in api.called("chat.postMessage")
    )


def diary(rng: random.Random, count: int) -> list[Dm]:
    return [
        Dm(f"U{rng.randrange(MEMBERS)}", f"1700000000.{n:06d}", f"note {n} for the diary")
        for n in range(count)
    ]


async def stored_counts(sessions) -> dict[str, int]:
    async with sessions() as session:
        rows = await session.execute(
            select(Event.dedup_key, func.count()).group_by(Event.dedup_key)
        )
        return dict(rows.all())


@pytest.fixture
async def rig(fake, pg_url, schema):
    """(fake Slack Web API, the Events API side, the `companion run` process)."""
    port = free_port()
    async with FakeSlack(latency=LATENCY) as api, aiohttp.ClientSession() as http:
        for n in range(MEMBERS):
            api.add_user(f"U{n}")
        env = slack_http_env(fake, pg_url, schema, api, port, COMPANION_RATE_LIMIT="off")
        slack = EventsApi(f"http://127.0.0.1:{port}/slack/events")
        companion = Companion(env, http, port)
        workers = [asyncio.create_task(slack.worker(http)) for _ in range(IN_FLIGHT)]
        try:
            yield api, slack, companion
        finally:
            for worker in workers:
                worker.cancel()
            await companion.cleanup()


async def test_every_acknowledged_event_survives_sigkill(rig, sessions):
    api, slack, companion = rig
    rng = random.Random(SEED)
    dms = diary(rng, MESSAGES)
    writing = None
    for _ in range(KILLS):
        await companion.start()
        writing = writing or asyncio.create_task(slack.members_write(dms))
        target = min(len(slack.acked) + rng.randint(1, 6), len(dms))
        assert await until(lambda: len(slack.acked) >= target, 30), "no 200 came"  # noqa: B023
        await asyncio.sleep(rng.uniform(0, 2 * LATENCY))
        await companion.kill()
    await companion.start()
    everything = await until(
        lambda: len(slack.acked) == len(dms) and all(answered(api, d) for d in dms), TIMEOUT
    )
    err = await companion.stop()
    assert "Traceback" not in err, err[err.find("Traceback") - 300 :][:3000]
    stored = await stored_counts(sessions)
    lost = [d.text for d in slack.acked if stored.get(d.dedup_key) != 1]
    unanswered = [d.text for d in slack.acked if not answered(api, d)]
    assert sum(slack.attempts.values()) > len(dms), "no kill hit an event on the wire"
    assert not lost, f"{len(lost)} of {len(slack.acked)} acknowledged, then lost: {lost}"
    assert not unanswered, f"acknowledged, never answered: {unanswered}"
    assert everything


async def test_sigterm_answers_everything_acknowledged_before_it_exits(rig, sessions):
    api, slack, companion = rig
    dms = diary(random.Random(SEED + 1), 16)
    await companion.start()
    writing = asyncio.create_task(slack.members_write(dms))
    assert await until(lambda: len(slack.acked) >= 6, 30)
    await companion.stop()
    writing.cancel()
    stored = await stored_counts(sessions)
    assert slack.acked
    assert [d.text for d in slack.acked if stored.get(d.dedup_key) != 1] == []
    assert [d.text for d in slack.acked if not answered(api, d)] == []
