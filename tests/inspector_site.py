"""The memory inspector served on loopback for tests, with members who have talked to it.

`serve_inspector` runs the real aiohttp app (`bot.web.add_inspector`) on the test database
and clock; `seed` gives tenant `discord:1` two members, Ann and Bob, with messages, blocks
and archival passages (uploaded files), through the real engine and fake model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web

from bot.web import Inspector, add_inspector
from core.config import EngineConfig
from core.events import EventKind, InboundEvent
from core.members.community import Community
from core.members.service import Members
from core.tenants.access import Access

TENANT = "discord:1"


@dataclass
class Site:
    url: str
    members: Members
    community: Community
    access: Access
    routes: list[tuple[str, str]]  # (method, path template) of every route the app serves

    async def link(self, user: str, tenant: str = TENANT) -> str:
        return await self.access.link(tenant, user, user)

    async def admin_link(self, actor: str = "mod", tenant: str = TENANT) -> str:
        return await self.access.link(tenant, None, actor)


@asynccontextmanager
async def serve_inspector(sessions, clock) -> AsyncIterator[Site]:
    members = Members(sessions, EngineConfig(), clock)
    community = Community(sessions, EngineConfig(), clock)
    access = Access(sessions, clock, "http://unset")
    app = add_inspector(web.Application(), Inspector(members, community, access))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    access.base_url = f"http://127.0.0.1:{port}"
    try:
        routes = sorted(
            {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
        )
        yield Site(access.base_url, members, community, access, routes)
    finally:
        await runner.cleanup()


async def seed(engine, clock) -> None:
    """Ann and Bob talk over the last week, so usage spreads over several days."""
    today = clock.now
    ann = await engine.agent(TENANT, "ann")
    bob = await engine.agent(TENANT, "bob")
    for days_ago, scope, text in (
        (6, ann, "remember that I sail on Sundays"),
        (5, bob, "remember that I play the trumpet"),
        (3, ann, "my sister lives in Lisbon"),
        (1, bob, "I was born in Lisbon"),
        (0, ann, "the weather is fine today"),
    ):
        clock.now = today - timedelta(days=days_ago)
        await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, text))
    await engine.upload(ann, "recipes.md", b"Grandma's lemon cake needs three lemons and patience.")
    await engine.upload(ann, "trip.txt", b"Ferry to Madeira leaves Friday at nine.")
    await engine.upload(bob, "bob.txt", b"Bob's locker code is 4411.")
