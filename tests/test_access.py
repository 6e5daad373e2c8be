"""Sign-in links for the memory inspector: signed, expiring, single-use, one member each."""

import asyncio
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from bot.database import make_engine
from core.config import EngineConfig
from core.errors import LinkRefused
from core.members.service import Members
from core.models import Meta, SigningSecret, SpentLink, WebSession
from core.tenants.access import SIGN_IN_PATH, Access
from core.tenants.tenancy import Tenancy


@pytest.fixture
def access(sessions, clock):
    return Access(sessions, clock, "https://companion.example/")


def token_of(url: str) -> str:
    parsed = urlparse(url)
    assert parsed.path == SIGN_IN_PATH
    return parse_qs(parsed.query)["token"][0]


async def test_a_member_link_signs_in_once_as_that_member(access, sessions):
    url = await access.link("discord:1", "ann", "ann")
    assert url.startswith("https://companion.example/signin?token=")
    cookie, viewer = await access.redeem(token_of(url))
    assert (viewer.tenant, viewer.member, viewer.is_admin) == ("discord:1", "ann", False)
    assert viewer.may_see("ann") and not viewer.may_see("bob")
    assert await access.viewer(cookie) == viewer
    with pytest.raises(LinkRefused, match="already used") as used:
        await access.redeem(token_of(url))
    assert used.value.reason == "used"
    async with sessions() as session:
        stored = (await session.scalars(select(WebSession))).one()
    assert cookie not in (stored.token_hash, stored.csrf)  # the table holds only a hash


async def test_an_admin_link_sees_anyone_in_its_tenant_for_an_hour(access, clock):
    cookie, viewer = await access.redeem(token_of(await access.link("slack:T1", None, "UADM")))
    assert viewer.is_admin and viewer.may_see("anyone") and viewer.actor == "UADM"
    clock.advance(minutes=59)
    assert await access.viewer(cookie) is not None
    clock.advance(minutes=2)
    assert await access.viewer(cookie) is None


async def test_links_expire_after_fifteen_minutes(access, clock):
    token = token_of(await access.link("discord:1", "ann", "ann"))
    clock.advance(minutes=15, seconds=1)
    with pytest.raises(LinkRefused, match="expired") as expired:
        await access.check(token)
    assert expired.value.reason == "expired"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-3] + ("AAA" if not t.endswith("AAA") else "BBB"),  # the signature
        lambda t: "eyJ0IjoiZGlzY29yZDoxIiwibSI6ImJvYiJ9" + t[t.index(".") :],  # the payload
        lambda t: t.split(".")[0],  # no signature at all
        lambda t: "not a token",
        lambda t: "",
    ],
)
async def test_tampered_links_are_refused(access, tamper):
    token = token_of(await access.link("discord:1", "ann", "ann"))
    with pytest.raises(LinkRefused, match="not valid") as bad:
        await access.redeem(tamper(token))
    assert bad.value.reason == "bad"


async def test_the_secret_is_kept_in_the_database_unless_given(sessions, clock):
    first = Access(sessions, clock, "http://x")
    token = token_of(await first.link("t", "ann", "ann"))
    again = Access(sessions, clock, "http://x")  # a restart, or another process
    assert (await again.check(token)).member == "ann"
    async with sessions() as session:
        stored = await session.scalar(select(SigningSecret.value))
        assert await session.scalar(select(Meta.value).where(Meta.key == "secret_key")) is None
    assert stored and len(stored) == 64
    other = Access(sessions, clock, "http://x", secret="set-by-the-operator")
    with pytest.raises(LinkRefused):
        await other.check(token)
    assert (await other.check(token_of(await other.link("t", "ann", "ann")))).member == "ann"


async def test_signing_out_ends_the_session_and_keeps_the_link_spent(access, clock):
    token = token_of(await access.link("t", "ann", "ann"))
    cookie, _ = await access.redeem(token)
    await access.sign_out(cookie)
    assert await access.viewer(cookie) is None
    with pytest.raises(LinkRefused, match="already used"):
        await access.redeem(token)
    clock.advance(minutes=10)
    other, _ = await access.redeem(token_of(await access.link("t", "ann", "ann")))
    bob, _ = await access.redeem(token_of(await access.link("t", "bob", "bob")))
    await access.sign_out_member("t", "ann")
    assert await access.viewer(other) is None and await access.viewer(bob) is not None


async def test_a_longer_link_lifetime_is_honoured(sessions, clock):
    access = Access(sessions, clock, "http://x", link_ttl=timedelta(hours=2))
    token = token_of(await access.link("t", "ann", "ann"))
    clock.advance(minutes=90)
    assert (await access.check(token)).member == "ann"
    clock.advance(minutes=31)
    with pytest.raises(LinkRefused, match="120 minutes"):
        await access.check(token)


async def test_a_used_link_stays_used_after_its_community_is_erased(sessions, clock, engine):
    """Issue 27, finding 1: the record of a spent link went with the erased sessions."""
    access = Access(sessions, clock, "http://x")
    await engine.agent("t", "ann")  # the community exists, with a member
    tenancy = Tenancy(sessions, clock)
    member = token_of(await access.link("t", "ann", "ann"))
    admin = token_of(await access.link("t", None, "mod"))
    for token in (member, admin):
        await access.redeem(token)
    assert await tenancy.erase("t", "operator test") is not None
    clock.advance(minutes=5)
    for token in (member, admin):
        with pytest.raises(LinkRefused, match="already used"):
            await access.redeem(token)
    # The automatic erase, at the end of a grace period, frees nothing either.
    await tenancy.departed("t")
    clock.advance(days=30, minutes=-5)
    again = token_of(await access.link("t", None, "mod"))
    await access.redeem(again)
    clock.advance(minutes=6)
    assert [e.tenant for e in await tenancy.erase_departed()] == ["t"]
    with pytest.raises(LinkRefused, match="already used"):
        await access.redeem(again)


async def test_forget_and_sign_out_free_no_link(access, sessions, clock, engine):
    await engine.agent("t", "ann")
    token = token_of(await access.link("t", "ann", "ann"))
    await access.redeem(token)
    members = Members(sessions, EngineConfig(), clock)
    assert await members.forget("t", "ann")
    await access.sign_out_member("t", "ann")
    with pytest.raises(LinkRefused, match="already used"):
        await access.redeem(token)


async def test_a_replica_with_shorter_links_does_not_free_a_longer_link(sessions, clock):
    """Issue 27, finding 8: the sweep used its own process's link lifetime, not the link's."""
    long = Access(sessions, clock, "http://x", link_ttl=timedelta(hours=2))
    short = Access(sessions, clock, "http://x", link_ttl=timedelta(minutes=15))
    token = token_of(await long.link("t", "ann", "ann"))
    cookie, _ = await long.redeem(token)
    await long.sign_out(cookie)
    clock.advance(minutes=90)  # the link has 30 minutes left; the short replica sweeps
    await short.redeem(token_of(await short.link("t", "bob", "bob")))
    with pytest.raises(LinkRefused, match="already used"):
        await long.redeem(token)
    clock.advance(minutes=31)  # now the link has expired, and its record may go
    await short.redeem(token_of(await short.link("t", "cy", "cy")))
    async with sessions() as session:
        left = await session.scalar(select(func.count()).select_from(SpentLink))
    assert left == 1  # only cy's link, used just now


async def test_two_presses_of_one_link_sign_in_once(access):
    token = token_of(await access.link("t", "ann", "ann"))
    results = await asyncio.gather(
        *(access.redeem(token) for _ in range(5)), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, LinkRefused) for r in results if isinstance(r, BaseException))


async def test_only_the_apps_own_role_reads_the_signing_secret(pg_url, schema, sessions, clock):
    """Issue 27, finding 5: the secret sat in `meta`, which companion_member may read (0006
    grants it `SELECT ON meta`, as an operator might a reporting role for the embedding
    dimension); with it, anyone signs admin links for every community."""
    await Access(sessions, clock, "http://x").link("t", None, "mod")  # the secret is in use
    engine = make_engine(pg_url, schema)  # the server's superuser
    reporting = f"reporting_{schema}"  # given what 0006 gives companion_member on meta
    try:
        async with engine.connect() as conn:  # one transaction, rolled back: no role stays
            await conn.execute(text(f"CREATE ROLE {reporting} NOLOGIN"))
            await conn.execute(text(f'GRANT USAGE ON SCHEMA "{schema}" TO {reporting}'))
            await conn.execute(text(f"GRANT SELECT ON meta TO {reporting}"))
            await conn.execute(text(f"SET ROLE {reporting}"))
            found = await conn.scalar(
                text("SELECT count(*) FROM meta WHERE value ~ '^[0-9a-f]{64}$'")
            )
            assert found == 0  # no secret left in meta
            with pytest.raises(DBAPIError, match="permission denied"):
                async with conn.begin_nested():
                    await conn.execute(text("SELECT value FROM signing_secret"))
            await conn.execute(text("RESET ROLE"))
            granted = await conn.scalar(  # to anyone but its owner, the app's role
                text(
                    "SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a "
                    "WHERE c.oid = 'signing_secret'::regclass AND a.grantee <> c.relowner"
                )
            )
            assert granted == 0
            await conn.rollback()
    finally:
        await engine.dispose()


class Platform:
    """What the platform says of who administers what; None: it cannot say."""

    def __init__(self) -> None:
        self.admins: set[tuple[str, str]] = {("t", "mod")}
        self.reachable = True
        self.asked = 0

    async def is_admin(self, tenant: str, user: str) -> bool | None:
        self.asked += 1
        return (tenant, user) in self.admins if self.reachable else None


async def test_an_admin_demoted_on_the_platform_loses_the_pages_within_a_minute(sessions, clock):
    """Issue 27, finding 7: rights were checked when the link was made only; a demoted admin
    kept the admin pages for the link's 15 minutes plus the session's hour."""
    platform = Platform()
    access = Access(sessions, clock, "http://x", rights=platform)
    cookie, _ = await access.redeem(token_of(await access.link("t", None, "mod")))
    member, _ = await access.redeem(token_of(await access.link("t", "ann", "ann")))
    assert (await access.viewer(cookie)).is_admin
    platform.admins.clear()  # demoted on the platform
    clock.advance(seconds=30)
    assert await access.viewer(cookie) is not None  # asked once a minute at most
    assert platform.asked == 1
    clock.advance(seconds=31)
    assert await access.viewer(cookie) is None
    async with sessions() as session:  # the session is over, not just refused once
        assert await session.scalar(select(func.count()).select_from(WebSession)) == 1
    assert await access.viewer(member) is not None and platform.asked == 2  # members: never


async def test_operator_links_and_platforms_not_served_keep_the_links_rights(sessions, clock):
    platform = Platform()
    platform.reachable = False  # `companion web` alone: no platform to ask
    access = Access(sessions, clock, "http://x", rights=platform)
    admin, _ = await access.redeem(token_of(await access.link("t", None, "mod")))
    operator, _ = await access.redeem(token_of(await access.link("t", None, "operator ops")))
    for _ in range(3):
        assert await access.viewer(admin) is not None
        assert await access.viewer(operator) is not None
        clock.advance(seconds=40)
    assert platform.asked == 2  # for the admin, once a minute; for the operator, never


async def test_slack_and_discord_answer_whether_an_admin_still_is_one(engine, members):
    from adapters.common import Services
    from adapters.slack.commands import admin_rights
    from adapters.slack.events import one_workspace
    from tests.fake_slack import TEAM
    from tests.rigs import slack_rig

    services = Services(engine, members, frozenset({"UOPS"}))
    async with slack_rig(services, users=("U1",), admins=("UADMIN",)) as rig:
        check = admin_rights(services, one_workspace(rig.app.client))
        tenant = f"slack:{TEAM}"
        assert await check(tenant, "UADMIN") is True
        assert await check(tenant, "UOPS") is True  # COMPANION_ADMIN_IDS
        assert await check(tenant, "U1") is False
        rig.api.users["UADMIN"]["is_admin"] = False
        assert await check(tenant, "UADMIN") is False
        assert await check(tenant, "UGONE") is False  # no such user any more
        rig.api.fail_methods["users.info"] = "ratelimited"
        assert await check(tenant, "U1") is None  # Slack cannot say: the session keeps going
