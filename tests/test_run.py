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
    """One `companion run` in Slack's HTTP mode, as deployed (default log level and format),
    checked for everything it serves on its one port, then SIGTERM: it says it connected,
    is ready, answers a signed event once and refuses a forged one, serves the inspector
    (an admin's link signs in), health and metrics, and its logs are JSON lines that carry
    neither the member's words nor the token. (It was four processes in four files: this
    file, test_readiness, test_observability and test_web, each started for one of these.)"""
    from tests.test_observability import SECRET_WORDS, samples, value
    from tests.test_readiness import lines, until_ready_state
    from tests.test_web import client, sign_in

    port = free_port()
    root = f"http://127.0.0.1:{port}"
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
            # Ready, within a minute on a loaded machine, once Slack is connected.
            body = await until_ready_state(port, lambda status, body: status == 200, 60)
            assert body["platforms"]["Slack"]["state"] == "connected"
            event = {
                "type": "message",
                "channel": "D1",
                "user": "U1",
                "text": SECRET_WORDS,
                "ts": "1700000000.1",
                "channel_type": "im",
            }
            body = json.dumps(slack_envelope(event))
            url = f"{root}/slack/events"
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{root}/healthz") as r:
                    assert r.status == 200
                async with http.post(url, data=body, headers=signed(body, "secret")) as r:
                    assert r.status == 200
                async with http.post(url, data=body, headers=signed(body, "forged")) as r:
                    assert r.status == 401
                assert await wait_for(lambda: api.called("chat.postMessage"))
                assert api.called("chat.postMessage")[0]["text"] == f"You said: {SECRET_WORDS}"
                async with http.get(f"{root}/metrics") as r:
                    assert r.status == 200 and r.content_type == "text/plain"
                    found = samples(await r.read())
            done = value(found, "companion_events_total", kind="user_message", status="done")
            assert done == 1
            assert value(found, "companion_queue_depth", queue="events") == 0
            # The inspector beside Slack, on the same port.
            async with client() as http:
                async with http.get(f"{root}/") as page:
                    assert page.status == 200 and "/memory web" in await page.text()
                linked = await run_cli(env, "link", "--tenant", "slack:T1", "--admin")
                signed_in = await sign_in(http, linked.out.strip())
                assert signed_in.status == 303 and signed_in.headers["Location"] == "/admin"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err
        assert len(api.called("chat.postMessage")) == 1
    said = [line["message"] for line in lines(err.decode())]  # at the default level
    assert len(said) == len(err.decode().splitlines())  # every line is JSON
    assert any(m.startswith("Slack: connected as @") and "HTTP mode" in m for m in said), said
    assert "zucchini" not in err.decode() and "xoxb-test" not in err.decode()


async def test_run_without_platforms_says_what_to_set(fake, pg_url, schema):
    started = await run_cli(cli_env(fake, pg_url, schema), "run")
    assert started.code == 2
    assert "DISCORD_TOKEN" in started.err and "SLACK_BOT_TOKEN" in started.err
    assert len(started.err.strip().splitlines()) == 1
