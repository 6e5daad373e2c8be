"""Operator commands for scheduled interrupts, and for a whole community.

companion openers list [--due]      what is scheduled, when (UTC and local) and why
companion tick [--now ISO-8601]     one scheduler pass; with --now only what it would do
                                    (a dry run), unless --apply; openers go out over the
                                    platforms' REST APIs (`rest_platforms`)
companion tenant erase T [--yes]    every member's memory in one community, at once
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from bot.app import App
from bot.delivery import Router
from core.errors import ConfigError
from core.events import Purpose
from core.runtime.tick import TickReport, preview, tick

# The times `--now` may name: a pass plans days ahead and looks weeks back from its moment,
# which Python's dates (years 1 to 9999) must hold.
EARLIEST_NOW = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_NOW = datetime(9000, 1, 1, tzinfo=UTC)


def parse_now(text: str | None) -> datetime:
    """`--now` in UTC (a time without an offset is UTC), so what is printed with a `Z` is."""
    if not text:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
        moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        moment = None
    if moment is None or not EARLIEST_NOW <= moment < LATEST_NOW:
        raise ConfigError(
            f"--now must be an ISO-8601 time like 2026-12-01T09:30Z, from 1970 to 8999, "
            f"got {text!r}"
        )
    return moment


OPENERS_HEADER = "tenant\tuser\tdue (UTC)\tlocal time\tstate\twhy"


async def list_openers(app: App, due_only: bool, now: datetime) -> list[str]:
    """A header and one tab-separated line per scheduled opener; nothing when none is."""
    lines = []
    for opener in await app.members.scheduled_openers(now, due_only):
        at, zone = opener.at, opener.timezone
        local = at.astimezone(ZoneInfo(zone)).strftime("%a %Y-%m-%d %H:%M")
        state = "due" if at <= now else "scheduled"
        lines.append(
            f"{opener.tenant}\t{opener.user}\t{at:%Y-%m-%d %H:%M}Z\t{local} {zone}\t{state}\t"
            f"{opener.why}"
        )
    return [OPENERS_HEADER, *lines] if lines else []


@asynccontextmanager
async def rest_platforms(app: App) -> AsyncIterator[Router]:
    """The configured platforms over their REST APIs only (no gateway, no socket), added to
    the engine's router while the block runs: for `companion tick`."""
    settings, router = app.settings, app.platforms
    async with AsyncExitStack() as stack:
        if settings.discord_token:
            import discord

            from adapters.discord import use_discord_hosts
            from adapters.discord.posting import DiscordOutlets
            from adapters.discord.tenants import PLATFORM as DISCORD

            use_discord_hosts(settings.discord_api_url)
            client = discord.Client(intents=discord.Intents(guilds=True))  # REST only: no gateway
            await client.login(settings.discord_token)
            stack.push_async_callback(client.close)
            router.add(DISCORD, DiscordOutlets(client))
            stack.callback(router.remove, DISCORD)
        if settings.slack:
            from slack_sdk.web.async_client import AsyncWebClient

            from adapters.slack.events import PLATFORM as SLACK
            from adapters.slack.events import one_workspace
            from adapters.slack.posting import Clients, SlackOutlets

            clients: Clients
            if settings.slack_oauth:
                from bot.distribution import slack_distribution

                clients = slack_distribution(app).workspaces.client
            else:
                web = AsyncWebClient(
                    token=settings.slack_bot_token,
                    base_url=settings.slack_api_url or AsyncWebClient.BASE_URL,
                )
                clients = one_workspace(web)
            router.add(SLACK, SlackOutlets(clients))
            stack.callback(router.remove, SLACK)
        yield router


async def run_tick(app: App, now: datetime) -> str:
    """One pass at `now`. What is due is asked first (a rolled-back claim): with nothing
    due the pass would change nothing, so neither the engine (the turn's imports) nor a
    platform's client is made."""
    due = await preview(app.sessions, app.config.schedule, now)
    if not due.claimed and not due.respread:
        return tick_summary(TickReport(), now)
    async with rest_platforms(app):
        report = await tick(app.engine, now)
    return tick_summary(report, now)


async def preview_tick(app: App, now: datetime) -> str:
    """A dry run: each member a pass at `now` would run for, then one line that says so."""
    found = await preview(app.sessions, app.config.schedule, now)
    lines = [f"would run {c.purpose} for {c.user}@{c.tenant}" for c in found.claimed]
    kinds = [c.purpose for c in found.claimed]
    line = (
        f"{now:%Y-%m-%d %H:%M}Z (dry run, nothing changed; --apply runs it): "
        f"{kinds.count(Purpose.OPENER)} openers due"
    )
    if found.respread:
        line += respread_clause(found.respread, "would be re-spread", "")
    return "\n".join([*lines, line + f", {kinds.count(Purpose.UPKEEP)} upkeep runs due"])


def tick_summary(report: TickReport, now: datetime) -> str:
    """One line: what the pass did, including the openers it moved instead of sending."""
    kinds = [c.purpose for c in report.claimed]
    line = (
        f"{now:%Y-%m-%d %H:%M}Z: {kinds.count(Purpose.OPENER)} openers ({report.sent} sent, "
        f"{report.silent} silent, {report.undelivered} waiting for the member)"
    )
    if report.waiting:
        line += f", {report.waiting} waiting for the model"
    if report.respread:
        line += respread_clause(report.respread, "re-spread", " instead of sent at once")
    return line + f", {kinds.count(Purpose.UPKEEP)} upkeep runs"


def respread_clause(times: Sequence[datetime], done: str, tail: str) -> str:
    """The part of a tick's line that says which long-overdue openers were spread out."""
    first, last = min(times), max(times)
    return (
        f", {len(times)} long-overdue openers {done} between "
        f"{first:%Y-%m-%d %H:%M}Z and {last:%Y-%m-%d %H:%M}Z{tail}"
    )


async def erase_tenant(app: App, tenant: str, yes: bool, actor: str) -> int:
    """Erase a community after a confirmation (a terminal, or --yes); one line says what."""
    members = await app.tenancy.members(tenant)
    if members is None:
        print(f"nothing to erase: no tenant {tenant}", file=sys.stderr)
        return 0
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError("tenant erase erases memory for good: pass --yes to confirm")
        question = f"Erase ALL memory of {members} members of {tenant}? Type yes: "
        if (await asyncio.to_thread(input, question)).strip().lower() != "yes":
            print("not erased", file=sys.stderr)
            return 1
    erased = await app.tenancy.erase(tenant, actor)
    assert erased is not None
    print(f"erased all memory of {erased.members} members of {tenant}", file=sys.stderr)
    return 0
