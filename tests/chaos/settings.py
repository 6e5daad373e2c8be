"""Settings races: a member changes their time zone and quiet hours at the same moment.

send_race(race, slack_url, slack, gateway, discord)
    a Slack member types `/companion timezone Z` and `/companion quiet S` at once (two
    signed requests to the bot's /slack/events); a Discord member runs `/timezone` and
    `/quiet-hours` at once (two INTERACTION_CREATE on the live gateway session). What
    the member was told ("set") is noted on the race, per field
load_settings(db)   each member's saved time zone and quiet hours
settings_violations(races, saved)
    settings_lost: a field whose last change the member was told about holds another
    value at the end (one of a later change, not told, may have been saved before a
    kill: that is fine)
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any
from urllib.parse import urlencode

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chaos.checks import Violation
from tests.chaos.discord_api import ChaosDiscord, Gateway
from tests.chaos.plan import DISCORD_APP, Member, Race
from tests.chaos.slack_api import SECRET, ChaosSlack
from tests.fake_discord import command, member
from tests.fake_slack import signed

FIELDS = ("timezone", "quiet_hours")
STRING = 3  # Discord's option type
_ids = itertools.count(1)


async def send_race(
    race: Race, slack_url: str, slack: ChaosSlack, gateway: Gateway, discord: ChaosDiscord
) -> None:
    if race.member.platform == "slack":
        await asyncio.gather(
            *(_slack_command(race, f, slack_url, slack) for f in FIELDS), return_exceptions=True
        )
    else:
        await _discord_commands(race, gateway, discord)


async def _slack_command(race: Race, field: str, url: str, slack: ChaosSlack) -> None:
    words = f"timezone {race.timezone}" if field == "timezone" else f"quiet {race.quiet}"
    key = f"race{next(_ids)}"
    form = {
        "token": "legacy",
        "team_id": race.member.tenant.removeprefix("slack:"),
        "user_id": race.member.user,
        "command": "/companion",
        "text": words,
        "channel_id": race.member.channel,
        "trigger_id": key,
        "response_url": f"{slack.root}/respond/{key}",
    }
    body = urlencode(form)
    headers = {**signed(body, SECRET), "content-type": "application/x-www-form-urlencoded"}
    timeout = aiohttp.ClientTimeout(total=3)
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers=headers, timeout=timeout) as answer:
            await answer.read()
            if answer.status != 200:
                return
    for _ in range(100):  # the answer comes after the acknowledgement
        said = slack.responded.get(key)
        if said is not None:
            if "set to" in said:
                race.told.add(field)
            return
        await asyncio.sleep(0.1)


async def _discord_commands(race: Race, gateway: Gateway, discord: ChaosDiscord) -> None:
    session = gateway.live
    if session is None:
        return
    who, guild = _who(race.member), race.member.guild
    channel = int(race.member.channel)
    asked = {
        "timezone": command(
            DISCORD_APP,
            who,
            "timezone",
            [{"name": "zone", "type": STRING, "value": race.timezone}],
            guild_id=guild,
            channel_id=channel,
        ),
        "quiet_hours": command(
            DISCORD_APP,
            who,
            "quiet-hours",
            [{"name": "hours", "type": STRING, "value": race.quiet}],
            guild_id=guild,
            channel_id=channel,
        ),
    }
    await asyncio.gather(*(gateway.interact(payload) for payload in asked.values()))
    for _ in range(100):
        for field, payload in asked.items():
            answers = discord.callbacks(payload) + discord.followups(payload)
            if any(_told(field, call.body) for call in answers):
                race.told.add(field)
        if len(race.told) == len(FIELDS):
            return
        await asyncio.sleep(0.1)


def _who(someone: Member) -> dict[str, Any]:
    """The member as an interaction names them (in a server, with the permissions Discord
    computed for the channel, as it always sends them there)."""
    if someone.guild is None:
        return member(int(someone.user), someone.mid)["user"]
    return member(int(someone.user), someone.mid, permissions=0)


def _told(field: str, body: Any) -> bool:
    content = str(((body or {}).get("data") or body or {}).get("content") or "")
    return ("time zone is now" if field == "timezone" else "Quiet hours") in content


async def load_settings(db: AsyncEngine) -> dict[tuple[str, str], dict[str, str | None]]:
    """(tenant key, user id) -> the saved time zone and quiet hours."""
    async with db.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT t.key, u.external_id, u.timezone, u.settings->>'quiet_hours' "
                "FROM users u JOIN tenants t ON t.id = u.tenant_id"
            )
        )
        return {(t, u): {"timezone": z, "quiet_hours": q} for t, u, z, q in rows.all()}


def settings_violations(
    races: list[Race], saved: dict[tuple[str, str], dict[str, str | None]]
) -> list[Violation]:
    found = []
    members = {r.member.mid: r.member for r in races}
    for mid, someone in members.items():
        mine = [r for r in races if r.member.mid == mid]
        now = saved.get((someone.tenant, someone.user), {})
        for field in FIELDS:
            told = [n for n, r in enumerate(mine) if field in r.told]
            if not told:
                continue
            allowed = {_value(r, field) for r in mine[told[-1] :]}
            if now.get(field) not in allowed:
                found.append(
                    Violation(
                        "settings_lost",
                        mid,
                        "*",
                        f"{field} is {now.get(field)!r}; told {_value(mine[told[-1]], field)!r}",
                    )
                )
    return found


def _value(race: Race, field: str) -> str:
    return race.timezone if field == "timezone" else race.quiet
