"""One seeded campaign against real `companion run` processes, start to verdict.

    run_campaign(seed, knobs, pg_url, schema, workdir) -> Report

1. The fakes start: Slack's Web API (`ChaosSlack`), Discord's REST API and gateway
   (`ChaosDiscord`, `Gateway`), and per process a FakeOpenAI with the campaign's brain.
2. Traffic, for `knobs.seconds` from the moment the first `companion run` is ready: every
   member's items at their planned moments (Slack events retried until acknowledged;
   Discord messages to whatever session is live), `companion import --replace` of a member
   while they talk, gateway drops, model outages, the database restarted (stopped fast or
   immediately, or a backend killed), members changing two settings at the same moment,
   random latencies and errors everywhere.
3. Meanwhile `companion run` generations come and go: each lives its planned time and
   ends by SIGKILL or SIGTERM; the next starts at once. The one running when the traffic
   ends stays up.
4. Settle: faults off; that process runs until Slack's retries are acknowledged, waiting
   Discord messages are sent and the database stops changing (or a deadline passes);
   SIGTERM; then the product's scheduled jobs once (tests/chaos/sweep.py).
5. The invariants (tests/chaos/checks.py) over the fakes' records and Postgres
   (tests/chaos/report.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from contextlib import nullcontext
from pathlib import Path

from sqlalchemy import text

from bot.database import make_engine, migrate, serve_as_app_role
from tests.chaos import checks, report
from tests.chaos.database import Server
from tests.chaos.discord_api import ChaosDiscord, Gateway, World, dm_channel, member_message, user
from tests.chaos.faults import Faults, Knobs
from tests.chaos.model import Brain, Ledger
from tests.chaos.plan import (
    DISCORD_APP,
    DISCORD_BOT,
    DISCORD_BOT_ROLE,
    Item,
    Member,
    Plan,
    Race,
    Restart,
    import_doc,
    make_plan,
)
from tests.chaos.process import Generation, Processes
from tests.chaos.settings import load_settings, send_race, settings_violations
from tests.chaos.slack_api import SECRET, ChaosSlack, EventsApi
from tests.conftest import SERVED, cli_env
from tests.fake_discord import attachment

SETTLE_SECONDS = 25.0  # after the traffic: for Slack's retries and the last turns
QUIET_SECONDS = 2.5  # nothing stored, handled or delivered for this long: settled


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fresh_schema(pg_url: str, name: str, embedded: bool = True) -> str:
    """A new, migrated schema, set up as tests/conftest.py's `schema` fixture does it: on the
    embedded server, served as the ordinary role Companion uses there."""
    if embedded:
        served = await serve_as_app_role(pg_url, name)
    else:
        admin = make_engine(pg_url)
        async with admin.begin() as conn:
            await conn.execute(text(f"CREATE SCHEMA {name}"))
        await admin.dispose()
        served = pg_url
    SERVED[pg_url, name] = served  # what cli_env hands `companion` as DATABASE_URL
    engine = make_engine(served, schema=name)
    await migrate(engine, 16)
    await engine.dispose()
    return name


class Campaign:
    def __init__(self, plan: Plan, pg_url: str, schema: str, workdir: Path) -> None:
        self.plan = plan
        self.knobs: Knobs = plan.knobs
        self.pg_url, self.schema, self.workdir = pg_url, schema, workdir
        self.faults = Faults(random.Random(plan.seed * 7919 + 1), self.knobs)
        self.ledger = Ledger(self.knobs.window)
        self.rng = random.Random(plan.seed * 7919 + 2)
        self.bot = user(DISCORD_BOT, "Companion", bot=True)
        self.world = World(self.bot, DISCORD_APP, DISCORD_BOT_ROLE)
        self.t0 = 0.0
        self.sending: list[asyncio.Task] = []  # the traffic, and messages sent before kills
        self.giving_up = float("inf")  # when Discord members stop waiting for the bot
        self.server: Server | None = None  # the database, when this machine can restart it
        self.restarted: list[tuple[float, float, str]] = []  # (from, to, mode), monotonic

    def env(self, slack: ChaosSlack, discord: ChaosDiscord, gateway: Gateway, port: int) -> dict:
        knobs = self.knobs
        return cli_env(
            _NoModel(),
            self.pg_url,
            self.schema,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=slack.base_url,
            COMPANION_HTTP_HOST="127.0.0.1",
            COMPANION_HTTP_PORT=str(port),
            DISCORD_TOKEN="chaos-token",
            DISCORD_API_URL=discord.api_url,
            DISCORD_GATEWAY_URL=gateway.url,
            COMPANION_DISCORD_HOME_GUILD=str(self.plan.discord_guilds[0]),
            COMPANION_CONTEXT_WINDOW=str(knobs.window),
            COMPANION_RATE_LIMIT=knobs.rate_limit,
            COMPANION_MEMBER_DAILY_TOKENS=str(knobs.member_daily_tokens),
            COMPANION_MODEL_TIMEOUT=str(knobs.model_timeout),
            COMPANION_MODEL_RETRIES=str(knobs.model_retries),
            COMPANION_WELCOME="off",
            COMPANION_DATA_DIR=str(self.workdir / "data"),
        )

    def set_up_members(self, slack: ChaosSlack, discord: ChaosDiscord) -> None:
        for guild_id in self.plan.discord_guilds:
            self.world.add_guild(guild_id, owner_id=DISCORD_BOT)
        for member in self.plan.members:
            if member.platform == "slack":
                slack.add_user(member.user, tz=self.rng.choice(["Europe/Berlin", "America/Lima"]))
                continue
            uid, channel = int(member.user), int(member.channel)
            author = user(uid, member.mid)
            discord.users[uid] = author
            guild_id = int(member.tenant.removeprefix("discord:"))
            self.world.add_member(guild_id, uid, member.mid)
            if member.guild is None:
                discord.dm_channels[uid] = channel
                discord.channels[channel] = dm_channel(channel, author)
            else:
                discord.channels[channel] = self.world.add_channel(guild_id, channel, member.mid)

    async def at(self, offset: float) -> None:
        await asyncio.sleep(max(0.0, self.t0 + offset - time.monotonic()))

    async def send_discord(self, item: Item, discord: ChaosDiscord, gateway: Gateway) -> None:
        member = item.member
        files = []
        if item.file_name:
            discord.files[item.file_name] = item.file_data
            files = [
                attachment(discord.file_url(item.file_name), item.file_name, len(item.file_data))
            ]
        payload = member_message(
            discord.users[int(member.user)],
            int(member.channel),
            item.words or "",
            guild_id=member.guild,
            bot=self.bot,
            attachments=files,
        )
        if item.waits_for_bot:
            await gateway.wait_live(self.giving_up)
        discord.add_history(payload)
        item.tried = True
        if await gateway.post(payload):
            item.acked_at = time.monotonic()
        else:
            item.offline = True

    async def traffic(
        self, events: EventsApi, discord: ChaosDiscord, gateway: Gateway, procs: Processes
    ) -> None:
        async def one(item: Item) -> None:
            if item.at_kill or item.probe:
                return  # the supervisor sends these, before a SIGKILL or when settling
            await self.at(item.at)
            if item.member.platform == "slack":
                await events.send(item)
            else:
                await self.send_discord(item, discord, gateway)

        async def one_import(offset: float, member: Member) -> None:
            await self.at(offset)
            await procs.run_import(
                member.mid, member.tenant, member.user, import_doc(member, self.rng)
            )

        async def drop(offset: float, k: int) -> None:
            await self.at(offset)
            await (gateway.drop() if k % 2 == 0 else gateway.ask_reconnect())

        async def outage(offset: float) -> None:
            await self.at(offset)
            self.faults.outage(self.knobs.outage_seconds)

        restarting = asyncio.Lock()  # restarts drawn close together go one after another

        async def restart(planned: Restart) -> None:
            if self.server is None:
                return
            await self.at(planned.at)
            async with restarting:
                await restart_now(planned)

        async def restart_now(planned: Restart) -> None:
            assert self.server is not None
            began = time.monotonic()
            procs.database_up.clear()
            procs.database_restarts += 1
            try:
                await self.server.restart(planned.mode, planned.down)
            finally:
                procs.database_up.set()
            self.restarted.append((began, time.monotonic(), planned.mode))

        async def race(planned: Race) -> None:
            await self.at(planned.at)
            await send_race(planned, events.url, events.api, gateway, discord)

        await asyncio.gather(
            *(one(i) for i in self.plan.items),
            *(one_import(o, m) for o, m in self.plan.imports),
            *(drop(o, k) for k, o in enumerate(self.plan.drops)),
            *(outage(o) for o in self.plan.outages),
            *(restart(r) for r in self.plan.restarts),
            *(race(r) for r in self.plan.races),
        )

    async def generations(
        self, procs: Processes, events: EventsApi, first: Generation
    ) -> Generation:
        """`companion run` after `companion run`, each ended as planned, while the traffic
        lasts; the one running when it ends stays up for the settle phase."""
        gen = first
        for n, (seconds, kill) in enumerate(self.plan.lifetimes):
            if n:
                gen = await procs.start(f"run{n + 1}")
            burst = self.plan.kill_bursts.get(n, []) if kill else []
            # The first two ends happen however slowly the processes start on a loaded
            # machine: without them the campaign would have tried nothing.
            must = n < 2
            left = self.t0 + self.knobs.seconds - time.monotonic()
            wait = seconds if must else min(seconds, left)
            await asyncio.sleep(max(0.0, wait - (0.4 if burst else 0.0)))
            if not must and time.monotonic() - self.t0 >= self.knobs.seconds:
                return gen
            for item in burst:
                item.at = time.monotonic() - self.t0
                self.sending.append(asyncio.create_task(events.send(item)))
            await asyncio.sleep(0.4 if burst else 0.0)
            await procs.end(gen, kill)
        return await procs.start("final")

    async def settle(
        self,
        procs: Processes,
        last: Generation,
        events: EventsApi,
        discord: ChaosDiscord,
        gateway: Gateway,
    ) -> None:
        """Faults off; Slack's retries and the waiting Discord messages go through; every
        member sends one probe; once nothing changes in the database for a while, SIGTERM;
        then the scheduled jobs once."""
        self.faults.calm()
        events.giving_up = self.giving_up = time.monotonic() + SETTLE_SECONDS
        await asyncio.gather(*self.sending)
        probes = [i for i in self.plan.items if i.probe]
        for item in probes:
            item.at = time.monotonic() - self.t0
        await asyncio.gather(
            *(
                events.send(i)
                if i.member.platform == "slack"
                else self.send_discord(i, discord, gateway)
                for i in probes
            )
        )
        deadline = time.monotonic() + SETTLE_SECONDS
        seen, still_since = None, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - still_since < QUIET_SECONDS:
            async with procs.db.connect() as conn:
                now = tuple(
                    await conn.execute(
                        text(
                            "SELECT count(*), count(*) FILTER (WHERE processed_at IS NULL), "
                            "(SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL) "
                            "FROM events"
                        )
                    )
                )
            if now != seen:
                seen, still_since = now, time.monotonic()
            await asyncio.sleep(0.3)
        await procs.end(last, kill=False)
        await procs.sweep()

    async def run(self) -> report.Report:
        started = time.monotonic()
        quiet = logging.getLogger("aiohttp.server")  # a killed client's reset, as a traceback
        level, quiet.level = quiet.level, logging.CRITICAL
        brain = Brain(self.faults, self.ledger, self.rng, self.knobs.model_timeout)
        db = make_engine(self.pg_url, schema=self.schema)
        port = free_port()
        if self.knobs.pg_restarts:
            self.server = await Server.of(self.pg_url)
        try:
            async with (
                ChaosSlack(self.faults) as slack,
                ChaosDiscord(self.bot, DISCORD_APP, self.faults) as discord,
                Gateway(self.world, self.faults) as gateway,
            ):
                self.set_up_members(slack, discord)
                env = self.env(slack, discord, gateway, port)
                procs = Processes(env, port, brain, db, self.workdir)
                durable = self.server.durable_commits() if self.server else nullcontext()
                try:
                    async with (
                        durable,
                        EventsApi(slack, f"http://127.0.0.1:{port}/slack/events") as events,
                    ):
                        first = await procs.start("run1")  # the traffic starts once it is up
                        self.t0 = time.monotonic()
                        traffic = self.traffic(events, discord, gateway, procs)
                        self.sending.append(asyncio.create_task(traffic))
                        last = await self.generations(procs, events, first)
                        await self.settle(procs, last, events, discord, gateway)
                finally:
                    for task in self.sending:  # only when the campaign itself failed
                        task.cancel()
                    await procs.close()
                stored = await checks.load(db)
                saved = await load_settings(db)
                records = report.records(slack, discord, self.plan.members)
                result = report.verdict(self, procs, stored, records, gateway, events)
                result.violations += settings_violations(self.plan.races, saved)
        finally:
            await db.dispose()
            quiet.setLevel(level)
        result.counts["seconds"] = round(time.monotonic() - started, 1)
        return result


class _NoModel:
    """cli_env wants a fake model's URL; each process gets its own (process.py)."""

    base_url = "http://127.0.0.1:9/unset"


async def run_campaign(
    seed: int, knobs: Knobs, pg_url: str, schema: str, workdir: Path
) -> report.Report:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    return await Campaign(make_plan(seed, knobs), pg_url, schema, workdir).run()
