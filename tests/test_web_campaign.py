"""The memory inspector under hostile input: the campaign of tests/web_campaign.py with a
fixed seed (`HYPOTHESIS_PROFILE=seeded`, conftest), and the boundary it goes through.

bench/web_campaign.py runs the same campaign longer, with fresh draws.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as fixed_seed
from hypothesis import strategies as st
from sqlalchemy import text

from bot.web.boundary import Input, clean
from tests.conftest import ROOT
from tests.inspector_site import seed, serve_inspector
from tests.test_web import client, sign_in
from tests.web_campaign import Campaign, rounds

EXAMPLES = int(os.environ.get("COMPANION_WEB_EXAMPLES", "15"))  # rounds of every route
SEED = int(os.environ.get("COMPANION_WEB_SEED", "27"))


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="')[1].split('"')[0]


@pytest.fixture(scope="module")
async def campaign(module_engine_for, module_sessions, module_clock) -> AsyncIterator[Campaign]:
    await seed(module_engine_for(), module_clock)
    async with (
        serve_inspector(module_sessions, module_clock) as site,
        client() as ann,
        client() as admin,
        client() as nobody,
    ):
        await sign_in(ann, await site.link("ann"))
        await sign_in(admin, await site.admin_link())
        csrf = {}
        for who, http, page in (("ann", ann, "/members/ann"), ("admin", admin, "/admin")):
            async with http.get(site.url + page) as answer:
                csrf[who] = csrf_of(await answer.text())
        found = Campaign(
            site, module_sessions, {"ann": ann, "admin": admin, "nobody": nobody}, csrf
        )
        yield found
        print(f"\nweb campaign: answers by status {dict(sorted(found.statuses.items()))}")


@pytest.fixture(scope="module")
def site_routes(campaign) -> list[tuple[str, str]]:
    return campaign.site.routes


@pytest.fixture(scope="module")
async def passages(campaign) -> list[int]:
    async with campaign.sessions() as session:
        return list((await session.scalars(text("SELECT id FROM passages"))).all())


@fixed_seed(SEED)
@settings(
    derandomize=False,  # with `seed`: the same draws each run, spread like random ones
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_no_hostile_request_gets_a_5xx_or_changes_what_it_was_refused(
    campaign, site_routes, passages, data
):
    for attempt in data.draw(rounds(site_routes, passages)):
        await campaign.attempt(attempt)


# --- the findings the campaign was built from, one by one -----------------------------------


@pytest.fixture
async def ann(engine, sessions, clock):
    """The seeded site, with Ann signed in: (site, her browser, her form token)."""
    await seed(engine, clock)
    async with serve_inspector(sessions, clock) as site, client() as http:
        await sign_in(http, await site.link("ann"))
        async with http.get(site.url + "/members/ann") as page:
            yield site, http, csrf_of(await page.text())


async def test_numbers_past_64_bits_or_negative_are_the_default_not_a_500(ann):
    site, http, csrf = ann
    huge = str(2**64)
    for path in (
        f"/members/ann/conversation?before={huge}",
        f"/members/ann/conversation?q=Lisbon&page={huge}",
        f"/members/ann/conversation?before=-{huge}",
        f"/members/ann/passages?page={huge}",
    ):
        async with http.get(site.url + path) as page:
            assert page.status == 200, path
            assert "Lisbon" in await page.text() or "lemon" in await page.text(), path
    gone = f"/members/ann/passages/{huge}/delete"
    async with http.post(site.url + gone, data={"csrf": csrf}, allow_redirects=False) as page:
        assert page.status == 404
        assert "no such page" in await page.text()


async def test_a_nul_in_a_search_finds_what_the_rest_of_the_words_find(ann):
    site, http, csrf = ann
    async with http.get(site.url + "/members/ann/conversation?q=Lis%00bon") as page:
        assert page.status == 200
        assert "sister lives in Lisbon" in await page.text()
    async with client() as admin:
        await sign_in(admin, await site.admin_link())
        async with admin.get(site.url + "/members/bob/conversation?q=%00Lisbon") as page:
            assert page.status == 200
            assert "born in Lisbon" in await page.text()


async def test_a_block_edit_with_nul_saves_the_rest_and_a_refused_one_keeps_the_text(ann):
    site, http, csrf = ann
    typed = "Ann sails\x00 on Sundays"
    form = {"csrf": csrf, "value": typed}
    async with http.post(site.url + "/members/ann/blocks/human", data=form) as page:
        assert page.status == 200
        assert "Ann sails on Sundays" in await page.text()
    too_long = "Ann\x00 " + "likes boats " * 300  # over the block's 2,000 characters
    form = {"csrf": csrf, "value": too_long}
    async with http.post(site.url + "/members/ann/blocks/human", data=form) as page:
        assert page.status == 400
        assert ("Ann " + "likes boats " * 300).strip() in await page.text()
    view = await site.members.view("discord:1", "ann")
    assert dict((label, value) for label, value, _ in view.blocks)["human"] == typed.replace(
        "\x00", ""
    )


async def test_a_form_over_the_size_limit_is_a_413_page_and_changes_nothing(ann):
    site, http, csrf = ann
    before = await site.members.view("discord:1", "ann")
    form = {"csrf": csrf, "value": "x" * 1_100_000}
    async with http.post(site.url + "/members/ann/blocks/human", data=form) as page:
        assert page.status == 413
        html = await page.text()
        assert "nothing was changed" in html and "Something went wrong" not in html
        assert page.headers["Content-Security-Policy"]  # answered through the same door
    assert await site.members.view("discord:1", "ann") == before


async def test_a_charset_that_carries_nul_and_lone_surrogates_reaches_nothing(ann):
    """A form in `raw_unicode_escape` puts NUL and lone surrogates in the server's text."""
    site, http, csrf = ann
    body = f"csrf={csrf}&value=Ann%5Cud800%5Cx00 sails".encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=raw_unicode_escape"}
    url = site.url + "/members/ann/blocks/human"
    async with http.post(url, data=body, headers=headers, allow_redirects=False) as page:
        assert page.status == 303
    view = await site.members.view("discord:1", "ann")
    assert dict((label, value) for label, value, _ in view.blocks)["human"] == "Ann\\x00 sails"
    headers["Content-Type"] = "application/x-www-form-urlencoded; charset=no-such-charset"
    async with http.post(url, data=body, headers=headers) as page:
        assert page.status == 400


async def test_an_address_cannot_put_its_own_words_in_a_pages_notice(ann):
    """`?saved=` names the block just saved: any other words in it are not shown as the
    site's own (a link that makes the member's page say what its sender wants)."""
    site, http, csrf = ann
    spoof = "/members/ann?saved=Your+session+expired.+Sign+in+at+evil.example+to+keep"
    async with http.get(site.url + spoof) as page:
        assert page.status == 200
        assert "evil.example" not in await page.text()
    async with http.get(site.url + "/members/ann?saved=human") as page:
        assert "Saved the human block." in await page.text()


async def _raw_status(url: str, request: bytes) -> int:
    """The status a request of raw bytes gets (a browser or client would not send them)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


async def test_a_cookie_of_bytes_that_are_not_text_is_no_session_not_a_500(ann):
    """A Cookie header with bytes that are not UTF-8 reaches the app as lone surrogates."""
    site, http, csrf = ann
    for path, status in (("/", 200), ("/members/ann", 401), ("/admin", 401)):
        for name in ("companion_session", "companion_signin"):
            request = (
                f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
                + f"Cookie: {name}=".encode()
                + b"\xff\xfe\xed\xa0\x80\r\n\r\n"
            )
            assert await _raw_status(site.url, request) == status, (path, name)
    form = b"token=x&nonce=abc"
    request = (
        b"POST /signin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Cookie: companion_signin=\xff\r\nContent-Length: %d\r\n\r\n%s" % (len(form), form)
    )
    assert await _raw_status(site.url, request) == 403  # not signed in: not from its page


def test_the_boundary_bounds_numbers_and_cleans_text():
    given = Input({}, {}, {})
    assert given.number(str(2**64), 1) == 1
    assert given.number("-3", 1) == 1
    assert given.number(" 42 ", 1) == 42
    assert given.number("4e2", 1) == 1
    assert given.number(str(2**63 - 1), 0, high=2**63 - 1) == 2**63 - 1
    assert given.number("٣", 1) == 1  # Arabic-Indic three: int() takes it, the boundary not
    assert clean("a\x00b\ud800c\udfffd") == "abcd"


def test_no_inspector_handler_reads_the_request_but_through_the_boundary():
    raw = re.compile(
        r"request\.(query|post\(|match_info|rel_url|content|read\(|json\(|text\(|cookies)"
    )
    for path in sorted((ROOT / "bot" / "web").glob("*.py")):
        if path.name == "boundary.py":
            continue
        found = [line for line in path.read_text().splitlines() if raw.search(line)]
        assert found == [], f"{path.name} reads the request itself: {found}"


@pytest.fixture
async def admin(engine, sessions, clock):
    """The seeded site, with an admin signed in: (site, their browser, their form token)."""
    await seed(engine, clock)
    async with serve_inspector(sessions, clock) as site, client() as http:
        await sign_in(http, await site.admin_link())
        async with http.get(site.url + "/admin/settings") as page:
            yield site, http, csrf_of(await page.text())


async def test_the_limits_form_shows_what_it_keeps_and_takes_it_back(admin):
    """A limit of 1,234,567 tokens showed as "1.23457e+06", and the form sent back as shown
    (to change another limit) was refused: "must be a number". A refused form without every
    field was a 500 (the page read the fields it lacked)."""
    site, http, csrf = admin
    partial = {"csrf": csrf, "rate_limit": "5/fortnight"}
    async with http.post(site.url + "/admin/limits", data=partial) as page:
        assert page.status == 400 and "Limits not saved" in await page.text()
    form = {
        "csrf": csrf,
        "rate_limit": "",
        "member_daily_tokens": "1234567",
        "tenant_daily_tokens": "",
        "member_daily_usd": "",
        "tenant_daily_usd": "",
    }
    for _ in range(2):  # then the form as the page shows it, unchanged
        async with http.post(site.url + "/admin/limits", data=form) as page:
            assert page.status == 200 and "Limits saved" in await page.text()
        async with http.get(site.url + "/admin/settings") as page:
            shown = await page.text()
        form["member_daily_tokens"] = re.search(
            r'name="member_daily_tokens" value="([^"]*)"', shown
        ).group(1)
        assert form["member_daily_tokens"] == "1234567"
