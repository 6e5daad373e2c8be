"""Settings changed at the same moment never write over each other.

Found: `/companion timezone Z` followed at once by `/companion quiet S`: both answered "set",
and for 4-5 of 30 members the quiet hours were lost (each change rewrote the whole settings
document from a copy read without a lock), so those members got openers in hours they had
said were quiet. Every change now holds the member's (or the community's) row while it
reads and writes, whatever the front end.
"""

from __future__ import annotations

import asyncio

from adapters.common import Services
from tests.fake_slack import TEAM
from tests.rigs import slack_rig

TENANT = f"slack:{TEAM}"
MEMBERS = [f"U{n:03d}" for n in range(30)]


async def test_settings_from_every_front_end_at_once_are_all_kept(engine, members):
    async with slack_rig(Services(engine, members), users=tuple(MEMBERS)) as slack:
        for user in MEMBERS:  # each member exists before the race
            await members.settings(TENANT, user, openers=True)

        async def one(user: str) -> None:
            await asyncio.gather(
                slack.command("timezone Asia/Tokyo", user=user),
                slack.command("quiet 22:00-07:30", user=user),
                members.settings(TENANT, user, openers=False),  # the inspector's form
            )

        await asyncio.gather(*(one(user) for user in MEMBERS))
    for user in MEMBERS:
        saved = await members.settings(TENANT, user)
        assert (saved["timezone"], saved["quiet_hours"], saved["openers"]) == (
            "Asia/Tokyo",
            "22:00-07:30",
            False,
        ), user


async def test_community_settings_changed_at_once_are_all_kept(members):
    for round_ in range(10):
        changes = [{"welcome": round_ % 2 == 0}, {"openers": round_ % 3 == 0}, {"upkeep": False}]
        await asyncio.gather(
            *(members.tenant_settings(TENANT, f"UADMIN{n}", **c) for n, c in enumerate(changes))
        )
        kept = await members.tenant_settings(TENANT)
        assert kept == {"welcome": round_ % 2 == 0, "openers": round_ % 3 == 0, "upkeep": False}
