"""`companion run` tells the truth about each platform, and stops when told to.

A refused token stops the start with one line (exit 2); an unreachable platform is
`retrying` in /readyz while the rest serves, and SIGTERM stops the process in every mode;
a connected platform is announced with who the bot is (tests/test_run.py). After a
restart, the backlog is worked off in the background, several members at a time, while
/healthz answers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import aiohttp
import pytest

from core.events import EventKind, InboundEvent
from tests.conftest import COMPANION, cli_env, run_cli
from tests.fake_discord import FakeDiscord, user
from tests.fake_openai import is_summary_request, say, summary_of
from tests.fake_slack import FakeSlack
from tests.test_run import free_port, slack_http_env

BOT = user(1_400_000_000_000_000_010, "Companion", bot=True)
APP_ID = 1_400_000_000_000_000_011


async def start(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *COMPANION, "run", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}{path}") as response:
            return response.status, await response.json()


async def until_ready_state(port: int, check, seconds: float = 30.0) -> dict[str, Any]:
    """Poll /readyz until `check(body)` holds; return that body."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        try:
            status, body = await get(port, "/readyz")
            last = (status, body)
            if check(status, body):
                return body
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"/readyz never got there; last {last}")


async def stop(proc: asyncio.subprocess.Process, within: float = 35.0) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    _, err = await asyncio.wait_for(proc.communicate(), within)
    assert time.monotonic() - started < within
    return proc.returncode or 0, err.decode()


def lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


async def test_a_refused_discord_token_stops_the_start_in_one_line(fake, pg_url, schema):
    async with FakeDiscord(BOT, APP_ID) as discord:
        discord.token_refused = True
        env = cli_env(
            fake, pg_url, schema, DISCORD_TOKEN="revoked", DISCORD_API_URL=discord.api_url
        )
        env["COMPANION_HTTP_PORT"] = str(free_port())
        started = await run_cli(env, "run")  # what it says and returns: in this process
    assert started.code == 2
    assert started.err.strip().splitlines()[-1] == (
        "companion: Discord: DISCORD_TOKEN was refused (HTTP 401); reset the token under Bot "
        "in the Discord Developer Portal and set the new one"
    )
    assert "Traceback" not in started.err


async def test_a_refused_slack_token_stops_the_start_in_one_line(fake, pg_url, schema):
    async with FakeSlack() as api:
        api.fail_methods["auth.test"] = "invalid_auth"
        started = await run_cli(slack_http_env(fake, pg_url, schema, api, free_port()), "run")
    assert started.code == 2 and "Traceback" not in started.err
    assert (
        started.err.strip()
        .splitlines()[-1]
        .startswith("companion: Slack: SLACK_BOT_TOKEN was refused (invalid_auth)")
    )


@pytest.mark.parametrize("platform", ["discord", "slack socket mode"])
async def test_an_unreachable_platform_is_retrying_and_sigterm_still_stops(
    fake, pg_url, schema, platform
):
    port, nowhere = free_port(), f"http://127.0.0.1:{free_port()}"
    extra = (
        {"DISCORD_TOKEN": "t", "DISCORD_API_URL": f"{nowhere}/api/v10"}
        if platform == "discord"
        else {"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t", "SLACK_API_URL": nowhere}
    )
    env = cli_env(fake, pg_url, schema, COMPANION_HTTP_PORT=str(port), **extra)
    proc = await start(env)
    try:
        name = "Discord" if platform == "discord" else "Slack"
        body = await until_ready_state(
            port,
            lambda status, body: body.get("platforms", {}).get(name, {}).get("state") == "retrying",
        )
        assert "cannot reach" in body["platforms"][name]["detail"] and not body["ready"]
        assert f"{name} retrying" in body["reason"]
        assert (await get(port, "/healthz"))[0] == 200
    finally:
        code, err = await stop(proc)
    assert code == 0 and "Traceback" not in err
    said = [line["message"] for line in lines(err)]
    assert any(m.startswith(f"{name}: cannot reach") for m in said), said
    assert said[-1] == "stopped"


async def test_a_backlog_is_worked_off_side_by_side_while_health_answers(
    engine, fake, pg_url, schema, sessions
):
    in_flight, most = 0, 0

    async def slow(body):
        nonlocal in_flight, most
        if is_summary_request(body):
            return summary_of(body)
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(1.0)
        in_flight -= 1
        return say("caught up")

    for i in range(8):  # a crash left one message pending for each of 8 members
        scope = await engine.agent("slack:T1", f"U{i}")
        await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, "hello", f"m{i}"))
    fake.brain = slow
    port = free_port()
    async with FakeSlack() as api:
        proc = await start(slack_http_env(fake, pg_url, schema, api, port))
        try:
            await until_ready_state(port, lambda status, body: status in (200, 503), 60)
            assert (await get(port, "/healthz"))[0] == 200  # answered during the backlog
            async with asyncio.timeout(60):
                while len(api.called("chat.postMessage")) < 8:  # noqa: ASYNC110 (a fake's log)
                    await asyncio.sleep(0.2)
        finally:
            await stop(proc)
    assert len(api.called("chat.postMessage")) == 8
    assert 2 <= most <= 4  # side by side, but bounded
