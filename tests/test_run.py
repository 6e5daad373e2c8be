"""`companion run` as an operator starts it: Slack in HTTP mode, real HTTP, then SIGTERM."""

import asyncio
import json
import signal
import socket

import aiohttp

from tests.conftest import COMPANION, cli_env, run_cli
from tests.fake_slack import FakeSlack, signed
from tests.rigs import slack_envelope


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for(predicate, seconds=20.0):
    for _ in range(int(seconds * 20)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False


def slack_http_env(fake, pg_url, schema, api, port, **extra: str) -> dict:
    """`companion run` in Slack HTTP mode on 127.0.0.1:port against the fake Slack API."""
    return cli_env(
        fake,
        pg_url,
        schema,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_SIGNING_SECRET="secret",
        SLACK_API_URL=api.base_url,
        COMPANION_HTTP_HOST="127.0.0.1",
        COMPANION_HTTP_PORT=str(port),
        **extra,
    )


async def test_run_serves_slack_over_http_and_stops_on_sigterm(fake, pg_url, schema):
    port = free_port()
    async with FakeSlack() as api:
        env = slack_http_env(fake, pg_url, schema, api, port)
        proc = await asyncio.create_subprocess_exec(
            *COMPANION,
            "run",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            url = f"http://127.0.0.1:{port}/slack/events"
            event = {
                "type": "message",
                "channel": "D1",
                "user": "U1",
                "text": "hi over http",
                "ts": "1700000000.1",
                "channel_type": "im",
            }
            body = json.dumps(slack_envelope(event))
            async with aiohttp.ClientSession() as http:
                for _ in range(600):  # until the server listens (a minute, for a loaded machine)
                    try:
                        async with http.post(url, data=body, headers=signed(body, "secret")) as r:
                            assert r.status == 200
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)
                else:
                    raise AssertionError("companion run never listened on its HTTP port")
                async with http.post(url, data=body, headers=signed(body, "forged")) as r:
                    assert r.status == 401
            assert await wait_for(lambda: api.called("chat.postMessage"))
            assert api.called("chat.postMessage")[0]["text"] == "You said: hi over http"
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err
        assert len(api.called("chat.postMessage")) == 1


async def test_run_without_platforms_says_what_to_set(fake, pg_url, schema):
    started = await run_cli(cli_env(fake, pg_url, schema), "run")
    assert started.code == 2
    assert "DISCORD_TOKEN" in started.err and "SLACK_BOT_TOKEN" in started.err
    assert len(started.err.strip().splitlines()) == 1
