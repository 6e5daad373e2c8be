"""The inspector as an operator runs it (`companion web`, `companion link`; beside Slack under
`companion run`: tests/test_run.py), and what every response carries, over plain HTTP. The
pages themselves: test_browser.py."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import date

import aiohttp
import pytest

from bot.settings import Settings
from bot.web.render import usage_chart
from core.errors import ConfigError
from core.members.community import UsageDay
from tests.conftest import COMPANION, cli_env, run_cli
from tests.inspector_site import TENANT, seed, serve_inspector
from tests.test_run import free_port


def client() -> aiohttp.ClientSession:
    """A client that keeps cookies from 127.0.0.1 too, like a browser does."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def until_listening(url: str, http: aiohttp.ClientSession) -> None:
    for _ in range(200):
        try:
            async with http.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing answered at {url}")


async def sign_in(http: aiohttp.ClientSession, link: str) -> aiohttp.ClientResponse:
    token = link.split("token=")[1]
    async with http.get(link) as page:
        html = await page.text()
        assert page.status == 200 and "Continue" in html
    nonce = html.split('name="nonce" value="')[1].split('"')[0]
    base = link.split("/signin")[0]
    form = {"token": token, "nonce": nonce}
    return await http.post(f"{base}/signin", data=form, allow_redirects=False)


async def test_companion_web_serves_the_inspector_and_link_signs_in(fake, pg_url, schema, engine):
    await seed_one(engine)
    port, ops = free_port(), free_port()
    env = cli_env(
        fake,
        pg_url,
        schema,
        COMPANION_HTTP_HOST="127.0.0.1",
        COMPANION_HTTP_PORT=str(port),
        COMPANION_OPS_PORT=str(ops),
    )
    env.pop("OPENAI_API_KEY"), env.pop("COMPANION_MODEL")  # the inspector needs no model
    env.pop("COMPANION_OPS_PUBLIC")  # as deployed: the operator's pages off the public port
    proc = await asyncio.create_subprocess_exec(
        *COMPANION, "web", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        base = f"http://127.0.0.1:{port}"
        async with client() as http:
            await until_listening(f"{base}/healthz", http)
            # Issue 27, finding 9: /metrics and /readyz's details were public here.
            async with http.get(base + "/readyz") as response:
                assert response.status == 200 and await response.json() == {"ready": True}
            async with http.get(base + "/metrics") as response:
                assert response.status == 404
            async with http.get(f"http://127.0.0.1:{ops}/metrics") as response:
                assert response.status == 200 and "companion_" in await response.text()
            async with http.get(f"http://127.0.0.1:{ops}/readyz") as response:
                assert response.status == 200 and "platforms" in await response.json()
            async with http.get(base + "/") as response:
                assert response.status == 200
            linked = await run_cli(env, "link", "--tenant", TENANT, "--user", "ann")
            assert linked.code == 0 and "once, within 15 minutes" in linked.err
            link = linked.out.strip()
            assert link.startswith(f"{base}/signin?token=")
            signed = await sign_in(http, link)
            assert signed.status == 303 and signed.headers["Location"] == "/members/ann"
            cookie = signed.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
            async with http.get(base + "/members/ann") as page:
                assert page.status == 200 and "I sail on Sundays" in await page.text()

        async with client() as admin:
            linked = await run_cli(env, "link", "--tenant", TENANT, "--admin")
            signed = await sign_in(admin, linked.out.strip())
            assert signed.headers["Location"] == "/admin"
            async with admin.get(base + "/admin") as page:
                assert page.status == 200 and "ann" in await page.text()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err
    # One line per event, at the default INFO: it is starting (before the database and the
    # pages' imports), it listens, it stops, it stopped.
    said = [json.loads(line)["message"] for line in err.decode().splitlines()]
    ops = [s for s in said if s.startswith("operations (/readyz, /metrics) on 127.0.0.1:")]
    said = [s for s in said if s not in ops]
    assert len(ops) == 1, ops  # the details on their own listener, said once
    assert said[0] == f"starting the memory inspector on 127.0.0.1:{port} (database, pages)..."
    assert said[1].startswith(f"inspector on 127.0.0.1:{port}, links to ") and said[2:] == [
        "stopping",
        "stopped",
    ], said


async def seed_one(engine) -> None:
    from core.events import EventKind, InboundEvent

    ann = await engine.agent(TENANT, "ann")
    await engine.converse(
        ann, InboundEvent(EventKind.USER_MESSAGE, "remember that I sail on Sundays")
    )


async def test_companion_web_on_a_port_in_use_names_the_port_not_the_database(fake, pg_url, schema):
    """A port taken by another process was "the database failed (OSError: … address already
    in use); is it running, and is DATABASE_URL right?", exit 1."""
    taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    try:
        env = cli_env(fake, pg_url, schema, COMPANION_HTTP_HOST="127.0.0.1")
        run = await run_cli({**env, "COMPANION_HTTP_PORT": str(port)}, "web")
    finally:
        taken.close()
        await taken.wait_closed()
    assert run.code == 2 and "Traceback" not in run.err, run
    line = run.err.strip().splitlines()[-1]
    assert line.startswith(f"companion: cannot listen on 127.0.0.1:{port} ("), line
    assert "COMPANION_HTTP_PORT" in line and "DATABASE_URL" not in line, line


async def test_link_needs_a_member_or_admin_and_uses_the_public_url(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema, COMPANION_PUBLIC_URL="https://companion.example.org/")
    neither = await run_cli(env, "link", "--tenant", TENANT)
    assert neither.code == 2 and "--user" in neither.err and "--admin" in neither.err
    both = await run_cli(env, "link", "--tenant", TENANT, "--user", "ann", "--admin")
    assert both.code == 2
    linked = await run_cli(env, "link", "--tenant", TENANT, "--user", "nobody")
    assert linked.code == 0 and "no memory of nobody" in linked.err
    assert linked.out.startswith("https://companion.example.org/signin?token=")
    short = await run_cli(
        {**env, "COMPANION_SECRET_KEY": "short"}, "link", "--tenant", "t", "--admin"
    )
    assert short.code == 2 and "at least 32 characters" in short.err


async def test_every_page_is_uncached_unframed_and_a_session_ends_on_sign_out(
    engine, sessions, clock
):
    await seed(engine, clock)
    async with serve_inspector(sessions, clock) as site, client() as http:
        signed = await sign_in(http, await site.link("ann"))
        async with http.get(site.url + "/members/ann") as page:
            assert page.headers["Cache-Control"] == "no-store"
            assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
            assert page.headers["Referrer-Policy"] == "no-referrer"
            html = await page.text()
        csrf = html.split('name="csrf" value="')[1].split('"')[0]
        async with http.post(site.url + "/signout", data={"csrf": csrf}) as out:
            assert "You are signed out." in await out.text()
        async with http.get(site.url + "/members/ann", allow_redirects=False) as page:
            assert page.status == 401
        assert signed.status == 303


def test_links_point_at_the_public_url_else_the_host_and_port():
    assert Settings.from_env({}).base_url == "http://localhost:3000"
    assert Settings.from_env({"COMPANION_HTTP_HOST": "10.0.0.5"}).base_url == "http://10.0.0.5:3000"
    public = {"COMPANION_PUBLIC_URL": "https://me.example/companion/"}
    assert Settings.from_env(public).base_url == "https://me.example/companion"
    for bad in ("me.example", "ftp://me.example", "https://"):
        with pytest.raises(ConfigError, match="COMPANION_PUBLIC_URL"):
            Settings.from_env({"COMPANION_PUBLIC_URL": bad})
    assert Settings.from_env({"COMPANION_LINK_MINUTES": "60"}).link_minutes == 60


def test_the_usage_chart_stacks_cached_tokens_when_they_are_known():
    days = [UsageDay(date(2026, 3, d), t, c) for d, t, c in ((1, 0, None), (2, 800, None))]
    plain = usage_chart(days)
    assert not plain.has_cached and plain.top == 1000 and plain.total == 800
    assert plain.bars[1].height == pytest.approx(0.8 * (plain.base - 10))
    assert "800 tokens" in plain.bars[1].label and "cached" not in plain.bars[1].label
    cached = usage_chart([UsageDay(date(2026, 3, 1), 1000, 600)])
    assert cached.has_cached and cached.bars[0].cached_height == pytest.approx(
        0.6 * cached.bars[0].height
    )
    assert "600 cached, 400 uncached" in cached.bars[0].label


async def test_an_erase_from_any_front_end_signs_the_member_out_of_the_inspector(
    engine, sessions, clock
):
    """Issue 27, finding 4: forget from chat left the browser signed in, and a settings form
    posted from it then recreated the member."""
    await seed(engine, clock)
    async with serve_inspector(sessions, clock) as site, client() as ann, client() as bob:
        await sign_in(ann, await site.link("ann"))
        await sign_in(bob, await site.link("bob"))
        async with ann.get(site.url + "/members/ann/settings") as page:
            csrf = page_csrf(await page.text())
        await site.members.forget(TENANT, "ann")  # what /companion forget and /memory forget do
        form = {"csrf": csrf, "openers": "off", "quiet_hours": "22-9", "timezone": "UTC"}
        async with ann.post(site.url + "/members/ann/settings", data=form) as page:
            assert page.status == 401
        assert await site.members.profile(TENANT, "ann") is None  # not recreated
        await site.members.admin_reset(TENANT, "operator test", "bob")  # `companion reset` too
        async with bob.get(site.url + "/members/bob", allow_redirects=False) as page:
            assert page.status == 401


def page_csrf(html: str) -> str:
    return html.split('name="csrf" value="')[1].split('"')[0]
