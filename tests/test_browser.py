"""The memory inspector in a real browser: headless Chromium (Debian's `chromium`) driven by
Playwright, with JavaScript turned off, against the real aiohttp app on the test database.

Every page visited is photographed into a temporary directory (printed at the end of the
run; COMPANION_SCREENSHOTS picks another); COMPANION_DOCS_SCREENSHOTS=1 also refreshes the
pictures in docs/ that the README shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.events import EventKind, InboundEvent
from tests.conftest import ROOT
from tests.inspector_site import TENANT, seed, serve_inspector

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("COMPANION_SCREENSHOTS") or tempfile.gettempdir()) / "companion-shots"
DOCS = ROOT / "docs"

# A page here answers in well under a second. Past STALL, Chromium has stopped answering
# Playwright (seen in CI, never reproduced alone: a call with no timeout of its own, such as
# new_page or evaluate, then waits forever). The test fails with where it waited, and runs
# once more in a new Chromium; an assertion that fails is never run again.
STALL = 60


class BrowserStalled(Exception):
    """Chromium stopped answering: the browser failed, not the page under test."""


class Chromium:
    """One Chromium for the tests of this file (each launch cost a second or two of CPU),
    each test in browser contexts of its own, closed after it. A Chromium that stopped
    answering is never used again: the test's rerun and every later test get a new one."""

    def __init__(self) -> None:
        self.playwright: Any = None
        self.browser: Any = None
        self.stalled = False

    async def get(self) -> Any:
        if self.browser is not None and (self.stalled or not self.browser.is_connected()):
            await self.stop()
        if self.browser is None:
            from playwright.async_api import async_playwright

            self.stalled = False
            self.playwright = await async_playwright().start()
            self.browser = await self.playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=ARGS
            )
        return self.browser

    async def stop(self) -> None:
        """Leaving the driver ends the browser even when it answers nothing any more."""
        playwright, self.playwright, self.browser = self.playwright, None, None
        if playwright is not None:
            async with answering("stopping Playwright"):
                await playwright.stop()


CHROMIUM_RUNNING = Chromium()


pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Chromium is not installed (apt-get install chromium); .ci/run installs it",
    ),
    pytest.mark.flaky(reruns=1, only_rerun=["BrowserStalled"]),
    pytest.mark.xdist_group("chromium"),  # with `-n 2 --dist loadgroup`: one worker, one launch
]


@contextlib.asynccontextmanager
async def answering(what: str):
    try:
        async with asyncio.timeout(STALL):
            yield
    except TimeoutError as waited:
        CHROMIUM_RUNNING.stalled = True
        raise BrowserStalled(f"{what} was still waiting after {STALL} s") from waited


def within_stall(test):
    @functools.wraps(test)
    async def run(*args, **kwargs):
        async with answering(test.__name__):
            await test(*args, **kwargs)

    return run


@pytest.fixture(scope="module")
async def chromium() -> AsyncIterator[Chromium]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield CHROMIUM_RUNNING
    finally:
        await CHROMIUM_RUNNING.stop()
        print(f"\ninspector screenshots: {SHOTS}")


@pytest.fixture
async def browser(chromium: Chromium) -> AsyncIterator[Any]:
    """The shared Chromium; every context a test opens in it is closed after the test, so
    no test sees another's cookies or pages."""
    async with answering("starting Chromium"):
        shared = await chromium.get()
    before = set(shared.contexts)
    yield shared
    if not chromium.stalled:
        async with answering("closing the test's browser contexts"):
            for context in set(shared.contexts) - before:
                await context.close()


@pytest.fixture
async def site(engine, sessions, clock):
    await seed(engine, clock)
    async with serve_inspector(sessions, clock) as served:
        yield served


@pytest.fixture
async def context(browser):
    # No JavaScript: every page must work without it.
    async with answering("a new browser context"):
        ctx = await browser.new_context(
            java_script_enabled=False, viewport={"width": 1100, "height": 900}
        )
    ctx.set_default_timeout(10_000)
    yield ctx


async def shoot(page, name: str) -> None:
    """Keep a picture of the page, and check what every page must do."""
    await assert_accessible(page)
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    if os.environ.get("COMPANION_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        shutil.copy(path, DOCS / f"inspector-{name}.png")


async def assert_accessible(page) -> None:
    """Every control has a label, the page has one h1 and a language, nothing overflows."""
    unlabelled = await page.evaluate(
        """() => [...document.querySelectorAll('input, textarea, select')]
            .filter(e => e.type !== 'hidden' && e.labels.length === 0)
            .filter(e => !e.getAttribute('aria-label'))
            .map(e => e.outerHTML)"""
    )
    assert unlabelled == []
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (
        "the page is wider than the window"
    )
    assert await page.locator("h1").count() == 1
    assert await page.get_attribute("html", "lang") == "en"
    nameless = await page.evaluate(
        "() => [...document.querySelectorAll('button, a')].filter(e => !e.textContent.trim()"
        " && !e.getAttribute('aria-label')).length"
    )
    assert nameless == 0


async def sign_in(context, url: str):
    page = await context.new_page()
    await page.goto(url)
    await page.get_by_role("button", name="Continue").click()
    return page


# Members


@within_stall
async def test_a_member_signs_in_by_link_and_edits_a_block(site, context):
    page = await context.new_page()
    await page.goto(await site.link("ann"))
    assert "opens what your companion remembers about you" in await page.inner_text("main")
    await shoot(page, "signin")
    await page.get_by_role("button", name="Continue").click()
    assert page.url == f"{site.url}/members/ann"
    cookie = next(c for c in await context.cookies() if c["name"] == "companion_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    human = page.get_by_label("Text of the human block")
    assert "I sail on Sundays" in await human.input_value()
    assert await page.get_by_text("of 2,000 characters").count() == 2
    await shoot(page, "memory")

    await human.fill("Ann sails on Saturdays.\nHer sister lives in Lisbon.")
    await page.get_by_role("button", name="Save human").click()
    assert "Saved the human block." in await page.get_by_role("status").inner_text()
    view = await site.members.view(TENANT, "ann")
    assert dict((b[0], b[1]) for b in view.blocks)["human"].endswith("lives in Lisbon.")

    too_long = "A" * 2001
    await page.get_by_label("Text of the human block").fill(too_long)
    await page.get_by_role("button", name="Save human").click()
    alert = await page.get_by_role("alert").inner_text()
    assert "block 'human' would have 2001 characters, over its limit of 2000" in alert
    assert await page.get_by_label("Text of the human block").input_value() == too_long
    view = await site.members.view(TENANT, "ann")
    assert dict((b[0], b[1]) for b in view.blocks)["human"].endswith("lives in Lisbon.")


@within_stall
async def test_conversation_and_the_agents_own_search(site, context):
    page = await sign_in(context, await site.link("ann"))
    await page.get_by_role("link", name="Conversation").click()
    text = await page.inner_text("main")
    assert "my sister lives in Lisbon" in text and "You said: the weather is fine today" in text
    await page.get_by_label("Search the whole conversation").fill("Lisbon")
    await page.get_by_role("button", name="Search").click()
    results = await page.inner_text("main")
    assert "results for “Lisbon”" in results and "my sister lives in Lisbon" in results
    assert "born in Lisbon" not in results  # Bob said that
    await shoot(page, "conversation")


@within_stall
async def test_a_member_deletes_an_archival_passage(site, context):
    page = await sign_in(context, await site.link("ann"))
    await page.get_by_role("link", name="Archival memory").click()
    main = await page.inner_text("main")
    assert "From recipes.md (part 1 of 1)" in main and "three lemons" in main
    await shoot(page, "passages")
    await page.locator("li", has_text="recipes.md").get_by_role("button", name="Delete").click()
    assert "Deleted the passage." in await page.get_by_role("status").inner_text()
    main = await page.inner_text("main")
    assert "three lemons" not in main and "Ferry to Madeira" in main
    assert (await site.members.passages(TENANT, "ann")).total == 1
    assert (await site.members.passages(TENANT, "bob")).total == 1


@within_stall
async def test_a_member_sees_the_next_opener_and_changes_settings(site, context):
    page = await sign_in(context, await site.link("ann"))
    await page.get_by_role("link", name="Openers & settings").click()
    assert "Next opener:" in await page.inner_text("main")
    await page.get_by_label("Time zone", exact=True).fill("Mars/Olympus")
    await page.get_by_role("button", name="Save settings").click()
    assert "not a time zone" in await page.get_by_role("alert").inner_text()
    await page.get_by_label("Off: it only answers").check()
    await page.get_by_label("Quiet hours").fill("23:00-07:30")
    await page.get_by_label("Time zone", exact=True).fill("Europe/Lisbon")
    await page.get_by_role("button", name="Save settings").click()
    assert "Saved your settings." in await page.get_by_role("status").inner_text()
    assert "openers are off" in await page.inner_text("main")
    await shoot(page, "settings")
    view = await site.members.view(TENANT, "ann")
    assert view.settings["openers"] is False and view.settings["quiet_hours"] == "23:00-07:30"
    assert view.timezone == "Europe/Lisbon"


@within_stall
async def test_a_member_exports_then_forgets_after_confirming(site, context):
    page = await sign_in(context, await site.link("ann"))
    await page.get_by_role("link", name="Export & erase").click()
    await shoot(page, "data")
    async with page.expect_download() as waiting:
        await page.get_by_role("button", name="Download my memory (JSON)").click()
    download = await waiting.value
    assert download.suggested_filename == "memory-ann.json"
    doc = json.loads(await asyncio.to_thread(Path(await download.path()).read_text))
    assert any("my sister lives in Lisbon" in (m["content"] or "") for m in doc["messages"])
    assert len(doc["passages"]) == 2

    await page.get_by_role("link", name="Forget me…").click()
    assert "cannot be undone" in await page.inner_text("main")
    await shoot(page, "forget")
    await page.get_by_role("link", name="Cancel, keep everything").click()
    assert await site.members.view(TENANT, "ann") is not None
    await page.get_by_role("link", name="Forget me…").click()
    await page.get_by_role("button", name="Yes, erase everything").click()
    assert "everything your companion remembered about you is erased" in await page.inner_text(
        "main"
    )
    assert await site.members.view(TENANT, "ann") is None
    assert (await site.members.view(TENANT, "bob")).messages > 0
    response = await page.goto(f"{site.url}/members/ann")
    assert response.status == 401  # signed out everywhere


# Admins


@within_stall
async def test_an_admin_lists_members_opens_one_and_resets_them(site, context, engine):
    page = await sign_in(context, await site.admin_link("mod"))
    assert page.url == f"{site.url}/admin"
    table = await page.inner_text("table")
    assert "ann" in table and "bob" in table and "Tokens this month" in table
    ann_row = await page.locator("tr", has_text="ann").inner_text()
    assert "\t2\t" in ann_row  # two passages
    await shoot(page, "admin-members")

    await page.get_by_role("link", name="ann").click()
    assert "I sail on Sundays" in await page.get_by_label("Text of the human block").input_value()
    await shoot(page, "admin-member")
    await page.get_by_role("link", name="Usage").click()
    assert await page.locator("svg rect.bar").count() == 30
    await shoot(page, "admin-usage")
    await page.get_by_role("link", name="Settings").click()
    await page.locator("fieldset", has_text="Welcome").get_by_label("Off").check()
    await page.get_by_role("button", name="Save settings").click()
    assert "Saved" in await page.get_by_role("status").inner_text()
    assert not (await site.community.settings(TENANT)).welcome
    await shoot(page, "admin-settings")

    await page.goto(f"{site.url}/members/ann/data")
    await page.get_by_role("link", name="Reset this member…").click()
    await page.get_by_role("button", name="Yes, reset this member").click()
    assert "memory is erased" in await page.get_by_role("status").inner_text()
    fresh = await site.members.view(TENANT, "ann")
    assert fresh.messages == 0 and "Sundays" not in str(fresh.blocks)
    assert (await site.members.view(TENANT, "bob")).messages > 0

    await page.get_by_role("link", name="Audit log").click()
    rows = await page.locator("tbody tr").all_inner_texts()
    actions = [row.split("\t")[1:4] for row in rows]
    assert ["mod", "reset", "ann"] in actions[:3]  # then the page after it, a view
    assert any("\tsettings\t" in row for row in rows)
    assert any("working context" in row for row in rows)  # opening ann's page is audited
    await shoot(page, "admin-audit")


@within_stall
async def test_an_admin_sees_only_their_own_tenant(site, context, engine):
    other = await engine.agent("discord:2", "zoe")
    from core.events import EventKind, InboundEvent

    await engine.converse(other, InboundEvent(EventKind.USER_MESSAGE, "remember I am Zoe"))
    page = await sign_in(context, await site.admin_link("mod", tenant="discord:2"))
    assert "ann" not in await page.inner_text("main")
    for path in ("/members/ann", "/members/ann/conversation?q=Lisbon", "/members/ann/passages"):
        response = await page.goto(site.url + path)
        assert response.status == 404
        assert "Lisbon" not in await page.inner_text("body")


# Links and doors


@within_stall
async def test_expired_tampered_and_used_links_are_refused(site, context, clock):
    page = await context.new_page()
    link = await site.link("ann")
    clock.advance(minutes=16)
    response = await page.goto(link)
    assert response.status == 410 and "has expired" in await page.inner_text("main")
    await shoot(page, "link-refused")

    tampered = (await site.link("ann")).replace("token=", "token=x")
    response = await page.goto(tampered)
    assert response.status == 403 and "not valid" in await page.inner_text("main")
    bob_payload = (await site.link("bob")).split("token=")[1].split(".")[0]
    ann_signature = (await site.link("ann")).split("token=")[1].split(".")[1]
    response = await page.goto(f"{site.url}/signin?token={bob_payload}.{ann_signature}")
    assert response.status == 403  # Bob's payload under Ann's signature

    fresh = await site.link("ann")
    token = fresh.split("token=")[1]
    for form in ({"token": token}, {"token": token, "nonce": "guessed"}):  # not from its page
        posted = await context.request.post(f"{site.url}/signin", form=form, max_redirects=0)
        assert posted.status == 403 and "did not come from the link" in (await posted.text())
    await (await sign_in(context, fresh)).close()  # the link was not used up by those
    assert await page.goto(f"{site.url}/members/ann") and "Working context" in await page.title()

    used = fresh
    response = await page.goto(used)
    assert response.status == 410 and "already used" in await page.inner_text("main")
    assert await page.get_by_role("button", name="Continue").count() == 0


@within_stall
async def test_a_members_cookie_never_opens_another_members_pages(site, context):
    page = await sign_in(context, await site.link("bob"))
    for path in (
        "/members/ann",
        "/members/ann/conversation",
        "/members/ann/conversation?q=Lisbon",
        "/members/ann/passages",
        "/members/ann/settings",
        "/members/ann/data",
        "/members/ann/forget",
        "/members/bob/reset",
        "/admin",
        "/admin/audit",
    ):
        response = await page.goto(site.url + path)
        assert response.status == 403, path
        body = await page.inner_text("body")
        assert "sister" not in body and "Sundays" not in body and "lemons" not in body
    await page.goto(site.url + "/members/ann")
    assert "someone else's memory" in await page.inner_text("main")
    await shoot(page, "not-yours")
    bob = await page.goto(site.url + "/members/bob")
    csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
    posted = await context.request.post(
        f"{site.url}/members/ann/export", form={"csrf": csrf}, max_redirects=0
    )
    assert bob.status == 200 and posted.status == 403 and "Sundays" not in await posted.text()


@within_stall
async def test_forms_without_the_sessions_csrf_token_are_refused(site, context, browser):
    page = await sign_in(context, await site.link("ann"))
    before = await site.members.view(TENANT, "ann")
    passage = (await site.members.passages(TENANT, "ann")).rows[0].id
    for form in ({"value": "hijacked"}, {"value": "hijacked", "csrf": "wrong"}):
        for path in ("/members/ann/blocks/human", f"/members/ann/passages/{passage}/delete"):
            response = await context.request.post(site.url + path, form=form, max_redirects=0)
            assert response.status == 403 and "could not be checked" in await response.text()
    other = await browser.new_context(java_script_enabled=False)
    bob_page = await sign_in(other, await site.link("bob"))
    bobs_token = await bob_page.locator("input[name=csrf]").first.get_attribute("value")
    response = await context.request.post(
        f"{site.url}/members/ann/blocks/human", form={"value": "x", "csrf": bobs_token}
    )
    assert response.status == 403  # another session's token does not do
    await other.close()
    assert await site.members.view(TENANT, "ann") == before
    assert (await site.members.passages(TENANT, "ann")).total == 2
    await page.close()


@within_stall
async def test_pages_read_well_on_a_phone_and_by_keyboard(site, browser):
    phone = await browser.new_context(
        java_script_enabled=False, viewport={"width": 390, "height": 844}, is_mobile=True
    )
    page = await sign_in(phone, await site.link("ann"))
    for path in ("", "/conversation", "/passages", "/settings", "/data"):
        await page.goto(f"{site.url}/members/ann{path}")
        wide = await page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 390, path
    await page.goto(f"{site.url}/members/ann")
    await shoot(page, "phone")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
    await page.keyboard.press("Enter")
    await page.keyboard.press("Tab")
    focused = await page.evaluate("document.activeElement.id")
    assert focused == "value-1"  # past the header, straight to the first block's text
    await phone.close()


@within_stall
async def test_an_admin_gives_the_companion_a_name_instructions_and_persona(
    site, context, engine, fake
):
    page = await sign_in(context, await site.admin_link("mod"))
    await page.get_by_role("link", name="Your companion").click()
    assert "2 members who already have a companion" in await page.inner_text("legend")
    await page.get_by_label("Community instructions").fill("x" * 4001)
    await page.get_by_role("button", name="Save the companion").click()
    assert "4001 characters, over its limit of 4000" in await page.get_by_role("alert").inner_text()
    assert await page.get_by_label("Community instructions").input_value() == "x" * 4001

    await page.get_by_label("Name").fill("Skipper")
    await page.get_by_label("Community instructions").fill("We are a sailing club. Be brief.")
    await page.get_by_label("Persona of new members' companions").fill("I am Skipper, at sea.")
    await page.get_by_label("Replace their persona with this one").check()
    await page.get_by_role("button", name="Save the companion").click()
    notice = await page.get_by_role("status").inner_text()
    assert "Saved" in notice and "The persona of 2 members was replaced" in notice
    await shoot(page, "admin-companion")

    ann = await engine.agent(TENANT, "ann")
    await engine.converse(ann, InboundEvent(EventKind.USER_MESSAGE, "ahoy"))
    system = fake.chat_requests[-1]["messages"][0]["content"]
    assert "Your name in this community is Skipper." in system
    assert "We are a sailing club. Be brief." in system
    assert "I am Skipper, at sea." in system
    await page.get_by_role("link", name="Audit log").click()
    assert "\tcompanion\t" in (await page.locator("tbody tr").all_inner_texts())[0]


@within_stall
async def test_an_admin_limits_where_it_speaks_and_blocks_a_member(site, context):
    page = await sign_in(context, await site.admin_link("mod"))
    await page.get_by_role("link", name="Where & who").click()
    await page.get_by_label("Channels it answers in").fill("111, 222 <#222>")
    await page.get_by_label("Channels it never answers in").fill("222")
    await page.get_by_role("button", name="Save where it speaks").click()
    assert "cannot be both" in await page.get_by_role("alert").inner_text()
    assert await page.get_by_label("Channels it answers in").input_value() == "111, 222 <#222>"

    await page.get_by_label("Channels it never answers in").fill("333")
    await page.get_by_label("Channel where every message is for it").fill("444")
    await page.locator("fieldset", has_text="Direct messages").get_by_label("Off").check()
    await page.get_by_role("button", name="Save where it speaks").click()
    assert "Saved" in await page.get_by_role("status").inner_text()
    reach = await site.members.admission.reach(TENANT)
    assert (reach.channels, reach.never, reach.open_channel, reach.dms) == (
        ("111", "222"),
        ("333",),
        "444",
        False,
    )
    assert await page.get_by_label("Channels it answers in").input_value() == "111, 222"

    await page.get_by_label("Block a member").fill("bob")
    await page.get_by_role("button", name="Block", exact=True).click()
    assert "told once" in await page.get_by_role("status").inner_text()
    assert "bob" in await page.locator("section", has_text="Blocked members").inner_text()
    await shoot(page, "admin-reach")
    await page.get_by_role("link", name="Members").click()
    assert "blocked" in await page.locator("tr", has_text="bob").inner_text()
    assert "blocked" not in await page.locator("tr", has_text="ann").inner_text()
    await page.get_by_role("link", name="Where & who").click()
    await page.get_by_role("button", name="Unblock bob").click()
    assert "Nobody is blocked." in await page.inner_text("main")
    await page.get_by_role("link", name="Audit log").click()
    rows = await page.locator("tbody tr").all_inner_texts()
    assert [row.split("\t")[1:4] for row in rows[:2]] == [
        ["mod", "unblock", "bob"],
        ["mod", "block", "bob"],
    ]


@within_stall
async def test_an_admin_lowers_the_communitys_limits_and_sets_the_welcome(site, context):
    page = await sign_in(context, await site.admin_link("mod"))
    await page.get_by_role("link", name="Settings").click()
    rate = page.get_by_label("Messages one member may send per hour")
    assert "ceiling: 30" in await page.locator("#ceiling-rate_limit").inner_text()
    await rate.fill("50")
    await page.get_by_role("button", name="Save limits").click()
    assert "can be at most 30, the operator's ceiling" in (
        await page.get_by_role("alert").inner_text()
    )
    assert await rate.input_value() == "50"  # what was typed stays
    await rate.fill("10")
    await page.get_by_label("Model tokens the community may use per UTC day").fill("20,000")
    await page.get_by_role("button", name="Save limits").click()
    assert "Limits saved" in await page.get_by_role("status").inner_text()
    limits = {limit.key: limit.value for limit in await site.community.limits(TENANT)}
    assert limits["rate_limit"] == 10 and limits["tenant_daily_tokens"] == 20_000
    assert await rate.input_value() == "10"

    await page.get_by_label("What every welcome should say").fill("Say hi in #introductions.")
    await page.get_by_role("button", name="Save settings").click()
    assert (await site.community.settings(TENANT)).welcome_text == "Say hi in #introductions."
    await shoot(page, "admin-settings-limits")
