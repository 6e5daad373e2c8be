"""Slack in any workspace: the install flow, a token per workspace, rotation, uninstalls.

The Bolt app is built as `companion run` builds it with SLACK_CLIENT_ID (a Distribution on
the test's database) and served over real HTTP; FakeSlack plays Slack: it grants install
codes, answers oauth.v2.access and records which token every call carried.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiohttp
import pytest
import yaml
from slack_bolt.async_app import AsyncApp
from sqlalchemy import select, text

from adapters.common import Services
from adapters.slack import build_slack_app
from adapters.slack.oauth import SCOPES, Distribution, distribution
from adapters.slack.posting import SlackOutlets
from bot.delivery import Router
from bot.doctor.platforms import check_platforms
from bot.health import serving
from bot.settings import Settings
from core.errors import ConfigError, NotInstalled
from core.models import AuditEntry, Tenant
from core.runtime.tick import tick
from core.sealing import Sealer
from core.tenants.tenancy import Tenancy
from tests.conftest import COMPANION, ROOT, cli_env, run_cli
from tests.fake_slack import CLIENT_ID, CLIENT_SECRET, FakeSlack, settle, signed
from tests.rigs import slack_envelope, slack_ts
from tests.test_run import free_port, wait_for

SECRET = "oauth-signing-secret"
KEY = "k" * 40  # COMPANION_SECRET_KEY: Slack tokens are sealed with a key derived from it
SEALER = Sealer(KEY)


def authorize_query(html: str) -> dict[str, list[str]]:
    """The query of the "Add to Slack" link on the install page."""
    url = re.search(r'href="(https://slack.com/oauth/v2/authorize\?[^"]+)"', html)
    assert url, html
    return parse_qs(urlparse(url[1].replace("&amp;", "&")).query)


@dataclass
class Distributed:
    app: AsyncApp
    api: FakeSlack
    oauth: Distribution
    tenancy: Tenancy
    root: str  # where the app is served (COMPANION_PUBLIC_URL)

    async def install(self, team: str, expires_in: int | None = None) -> int:
        """Someone installs the app in `team` from the install page: the redirect's status."""
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{self.root}/slack/install") as page:
                assert page.status == 200
                html = await page.text()
                cookie = page.headers["Set-Cookie"].split(";", 1)[0]
            state = authorize_query(html)["state"][0]
            code = self.api.grant(team, expires_in)
            back = f"{self.root}/slack/oauth_redirect?code={code}&state={state}"
            async with http.get(back, headers={"Cookie": cookie}) as done:
                return done.status

    async def event(self, team: str, event: dict[str, Any]) -> int:
        """Slack posts `event` of workspace `team` to /slack/events: the HTTP status."""
        body = json.dumps({**slack_envelope(event), "team_id": team, "authorizations": []})
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self.root}/slack/events", data=body, headers=signed(body, SECRET)) as r,
        ):
            status = r.status
        await settle()
        return status

    async def dm(self, team: str, user: str, words: str) -> int:
        ts = slack_ts()
        event = {"type": "message", "channel": f"D{user}", "user": user, "text": words}
        return await self.event(team, {**event, "ts": ts, "channel_type": "im", "event_ts": ts})

    def answers(self) -> list[tuple[str | None, str]]:
        """(token, text) of every message the app posted."""
        posts = self.api.called("chat.postMessage")
        texts = [p["text"] for p in posts]
        return list(zip(self.api.token_of("chat.postMessage"), texts, strict=True))


@asynccontextmanager
async def distributed(engine, members, sessions, clock) -> AsyncIterator[Distributed]:
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    tenancy = Tenancy(sessions, clock)
    async with FakeSlack() as api:
        api.redirect_uri = f"{root}/slack/oauth_redirect"
        oauth = distribution(
            CLIENT_ID, CLIENT_SECRET, root, sessions.kw["bind"], tenancy, SEALER, api.base_url
        )
        services = Services(engine, members)
        app = build_slack_app(services, None, SECRET, api.base_url, distribution=oauth)
        async with serving(app.web_app(path="/slack/events"), "127.0.0.1", port):
            yield Distributed(app, api, oauth, tenancy, root)


@pytest.fixture
async def slack(engine, members, sessions, clock):
    async with distributed(engine, members, sessions, clock) as rig:
        yield rig


async def test_two_workspaces_install_and_each_is_answered_with_its_own_token(slack, engine):
    assert await slack.install("TA") == 200
    assert await slack.install("TB") == 200
    assert await slack.dm("TA", "U1", "hello from A") == 200
    assert await slack.dm("TB", "U1", "hello from B") == 200
    teams = slack.api.teams
    assert [(teams[token], words) for token, words in slack.answers()] == [
        ("TA", "You said: hello from A"),
        ("TB", "You said: hello from B"),
    ]
    # The same user id in two workspaces is two members, each with their own memory.
    first, second = await engine.agent("slack:TA", "U1"), await engine.agent("slack:TB", "U1")
    assert first.tenant_id != second.tenant_id


async def test_the_install_page_asks_for_the_manifests_scopes_and_redirects_back(slack):
    async with aiohttp.ClientSession() as http, http.get(f"{slack.root}/slack/install") as r:
        html = await r.text()
    query = authorize_query(html)
    assert query["client_id"] == [CLIENT_ID]
    assert query["redirect_uri"] == [f"{slack.root}/slack/oauth_redirect"]
    manifest = yaml.safe_load((ROOT / "deploy" / "slack-manifest.yaml").read_text())
    assert set(query["scope"][0].split(",")) == set(SCOPES)
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == set(SCOPES)


async def test_a_forged_or_replayed_redirect_installs_nothing(slack, sessions):
    code = slack.api.grant("TX")
    async with aiohttp.ClientSession() as http:
        forged = f"{slack.root}/slack/oauth_redirect?code={code}&state=made-up"
        async with http.get(forged, headers={"Cookie": "slack-app-oauth-state=made-up"}) as r:
            assert r.status in (400, 401)
    assert slack.api.called("oauth.v2.access") == []
    assert await slack.dm("TX", "U1", "anyone there?") != 500
    assert slack.answers() == []
    async with sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM slack_installations")) == 0
        assert await session.scalar(text("SELECT count(*) FROM events")) == 0


async def test_a_rotating_token_is_refreshed_before_it_expires(slack, engine, clock):
    assert await slack.install("TR", expires_in=60) == 200  # refreshed when < 2 h are left
    first = slack.api.token_of("auth.test")[-1]
    assert await slack.dm("TR", "U1", "still there?") == 200
    ((token, words),) = slack.answers()
    assert words == "You said: still there?" and token != first
    assert slack.api.teams[token] == "TR"
    assert [args.get("grant_type") for args in slack.api.called("oauth.v2.access")] == [
        None,
        "refresh_token",
    ]
    # Outside a request (an opener), the newest token is used, without another refresh.
    client = await slack.oauth.workspaces.client("slack:TR")
    assert client.token == token
    assert len(slack.api.called("oauth.v2.access")) == 2


async def test_an_opener_outside_a_request_uses_the_workspaces_token(slack, engine):
    await slack.install("TA")
    await slack.install("TB")
    router = Router()
    router.add("slack", SlackOutlets(slack.oauth.workspaces.client))
    await router.direct("slack:TB", "U7")("thought of you")
    assert slack.api.teams[slack.api.token_of("chat.postMessage")[-1]] == "TB"
    with pytest.raises(NotInstalled):
        await router.direct("slack:TNONE", "U7")("nobody installed me")


async def uninstalled(slack: Distributed, team: str) -> None:
    await slack.event(team, {"type": "app_uninstalled", "event_ts": slack_ts()})


async def test_an_uninstalled_workspace_keeps_its_memory_for_the_grace_period(
    slack, engine, sessions, clock
):
    await slack.install("TU")
    await slack.dm("TU", "U1", "my cat is Miso")
    await uninstalled(slack, "TU")
    with pytest.raises(NotInstalled):
        await slack.oauth.workspaces.client("slack:TU")
    assert await slack.tenancy.departed_at("slack:TU") == clock()
    assert await slack.tenancy.members("slack:TU") == 1

    clock.advance(days=29)
    assert await slack.tenancy.erase_departed() == []
    await slack.install("TU")  # back within the grace period: everything is still there
    assert await slack.tenancy.departed_at("slack:TU") is None
    clock.advance(days=60)
    assert await slack.tenancy.erase_departed() == []
    assert await slack.tenancy.members("slack:TU") == 1


async def test_after_the_grace_period_the_workspace_is_erased_and_audited(
    slack, engine, sessions, clock
):
    await slack.install("TG")
    await slack.dm("TG", "U1", "remember me")
    await slack.dm("TG", "U2", "me too")
    await slack.event("TG", {"type": "tokens_revoked", "tokens": {"bot": ["UBOTTG"]}})
    assert await slack.tenancy.departed_at("slack:TG") == clock()
    clock.advance(days=30, seconds=1)
    erased = await slack.tenancy.erase_departed()
    assert [(e.tenant, e.members) for e in erased] == [("slack:TG", 2)]
    async with sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM messages")) == 0
        assert await session.scalar(text("SELECT count(*) FROM agents")) == 0
        entry = await session.scalar(select(AuditEntry).where(AuditEntry.action == "erase tenant"))
        departed = await session.scalar(select(Tenant.departed_at).where(Tenant.key == "slack:TG"))
    assert (
        entry is not None and entry.actor.startswith("retention") and entry.detail["members"] == 2
    )
    assert departed is None
    assert await slack.tenancy.erase_departed() == []  # nothing erased twice


async def test_a_departed_workspace_is_not_scheduled(slack, engine, platforms, sessions, clock):
    for team in ("TW", "TK"):
        await slack.install(team)
        await slack.dm(team, "U1", "hi")
    await uninstalled(slack, "TW")
    async with sessions() as session, session.begin():
        await session.execute(text("UPDATE agents SET next_upkeep_at = :due"), {"due": clock()})
    platforms.add("slack", SlackOutlets(slack.oauth.workspaces.client))
    report = await tick(engine, clock())
    assert [claim.tenant for claim in report.claimed] == ["slack:TK"]


async def test_the_store_tables_are_the_migrations(sessions, clock):
    """slack_sdk's stores read and write the tables our migration made, column for column (a
    slack_sdk upgrade that adds a column needs a migration)."""
    tenancy = Tenancy(sessions, clock)
    oauth = distribution(CLIENT_ID, CLIENT_SECRET, "http://x", sessions.kw["bind"], tenancy, SEALER)
    tables = [
        oauth.installations.installations,
        oauth.installations.bots,
        oauth.settings.state_store.oauth_states,  # type: ignore[attr-defined]
    ]
    async with sessions() as session:
        for table in tables:
            rows = await session.execute(
                text(
                    "SELECT column_name, is_nullable FROM information_schema.columns "
                    "WHERE table_name = :t AND table_schema = current_schema()"
                ),
                {"t": table.name},
            )
            migrated = {name: nullable == "YES" for name, nullable in rows}
            assert migrated == {c.name: bool(c.nullable) for c in table.columns}, table.name


async def test_companion_run_serves_the_install_flow_for_any_workspace(fake, pg_url, schema):
    """As an operator starts it: SLACK_CLIENT_ID, no bot token; a workspace installs it,
    is answered with its own token, and /readyz says how to install."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    async with FakeSlack() as api:
        api.redirect_uri = f"{root}/slack/oauth_redirect"
        env = cli_env(
            fake,
            pg_url,
            schema,
            SLACK_CLIENT_ID=CLIENT_ID,
            SLACK_CLIENT_SECRET=CLIENT_SECRET,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=api.base_url,
            COMPANION_PUBLIC_URL=root,
            COMPANION_SECRET_KEY=KEY,
            COMPANION_HTTP_HOST="127.0.0.1",
            COMPANION_HTTP_PORT=str(port),
        )
        proc = await asyncio.create_subprocess_exec(
            *COMPANION, "run", env=env, stderr=asyncio.subprocess.PIPE
        )
        try:
            rig = Distributed(None, api, None, None, root)  # type: ignore[arg-type]
            async with aiohttp.ClientSession() as http:
                for _ in range(200):  # until it serves
                    try:
                        async with http.get(f"{root}/readyz") as ready:
                            if ready.status == 200:
                                readiness = await ready.json()
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
            assert f"{root}/slack/install" in json.dumps(readiness)
            assert await rig.install("TA") == 200
            assert await rig.dm("TA", "U1", "hello from A") == 200
            assert await wait_for(lambda: api.called("chat.postMessage"))
            ((token, words),) = rig.answers()
            assert words == "You said: hello from A" and api.teams[token] == "TA"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err


async def test_doctor_says_where_workspaces_install_and_warns_without_a_public_url():
    env = {"SLACK_CLIENT_ID": CLIENT_ID, "SLACK_CLIENT_SECRET": "c", "SLACK_SIGNING_SECRET": "s"}
    (unsealed,) = await check_platforms(Settings.from_env(env))
    assert unsealed.level == "FAIL" and "COMPANION_SECRET_KEY" in unsealed.text
    env["COMPANION_SECRET_KEY"] = KEY
    public = Settings.from_env({**env, "COMPANION_PUBLIC_URL": "https://bot.example.org"})
    (found,) = await check_platforms(public)
    assert found.level == "ok" and "https://bot.example.org/slack/install" in found.text
    (local,) = await check_platforms(Settings.from_env(env))
    assert local.level == "warn" and "COMPANION_PUBLIC_URL" in local.text


async def token_columns(sessions) -> str:
    """Every value of the token columns of both tables, as one text."""
    async with sessions() as session:
        rows = await session.execute(
            text(
                "SELECT bot_token, bot_refresh_token, user_token, user_refresh_token "
                "FROM slack_installations UNION ALL "
                "SELECT bot_token, bot_refresh_token, NULL, NULL FROM slack_bots"
            )
        )
        return json.dumps([list(row) for row in rows])


async def test_tokens_are_sealed_at_rest_and_a_revoked_one_leaves_every_row(slack, sessions):
    """Issue 27, finding 6: bot and refresh tokens were stored in plaintext, and after
    tokens_revoked the dead token stayed in slack_installations."""
    assert await slack.install("TS", expires_in=43_200) == 200  # a rotating token too
    stored = await token_columns(sessions)
    minted = [token for token, team in slack.api.teams.items() if team == "TS"]
    assert minted and not [t for t in minted if t in stored]
    assert "sealed:v1:" in stored and "xoxe" not in stored  # nor the refresh token
    assert await slack.dm("TS", "U1", "hello") == 200
    ((token, _),) = slack.answers()
    assert token in minted  # opened again to answer with it

    revoked = {"type": "tokens_revoked", "tokens": {"bot": ["UBOTTS"]}, "event_ts": slack_ts()}
    assert await slack.event("TS", revoked) == 200
    assert "sealed:v1:" not in await token_columns(sessions)
    with pytest.raises(NotInstalled):
        await slack.oauth.workspaces.client("slack:TS")


async def test_a_rotated_secret_opens_old_tokens_and_seals_them_anew(slack, sessions):
    await slack.install("TR")
    installations = slack.oauth.installations
    # A token stored before sealing existed, beside the sealed ones.
    async with sessions() as session, session.begin():
        await session.execute(text("UPDATE slack_bots SET bot_refresh_token = 'xoxe-plain'"))
    installations.sealer = Sealer("n" * 40, previous=KEY)  # COMPANION_SECRET_KEY rotated
    assert await installations.reseal() >= 3
    installations.sealer = Sealer("n" * 40)  # the previous one removed
    bot = await installations.latest_bot("TR")
    assert bot is not None and bot.bot_token.startswith("xoxb-TR")
    assert bot.bot_refresh_token == "xoxe-plain"
    assert "xoxe-plain" not in await token_columns(sessions)
    installations.sealer = Sealer("w" * 40)  # a wrong secret says so, in one line
    with pytest.raises(ConfigError, match="COMPANION_PREVIOUS_SECRET_KEY"):
        await installations.latest_bot("TR")


async def test_run_without_a_secret_key_says_so_before_storing_any_token(fake, pg_url, schema):
    env = cli_env(
        fake,
        pg_url,
        schema,
        SLACK_CLIENT_ID=CLIENT_ID,
        SLACK_CLIENT_SECRET=CLIENT_SECRET,
        SLACK_SIGNING_SECRET=SECRET,
        COMPANION_HTTP_HOST="127.0.0.1",
        COMPANION_HTTP_PORT=str(free_port()),
    )
    run = await run_cli(env, "run")
    last = run.err.strip().splitlines()[-1]  # after `companion run`'s JSON log lines
    assert run.code == 2 and last.startswith("companion: SLACK_CLIENT_ID"), run
    assert "COMPANION_SECRET_KEY" in last and "Traceback" not in run.err
