"""Sign-in links for the memory inspector: signed, expiring, single-use, one member each."""

from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select

from core.errors import LinkRefused
from core.members.access import SIGN_IN_PATH, Access
from core.models import Meta, WebSession


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
        stored = await session.scalar(select(Meta.value).where(Meta.key == "secret_key"))
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
