"""`companion run`: every configured platform and the scheduler, in one process.

    Discord   when DISCORD_TOKEN is set
    Slack     when SLACK_BOT_TOKEN is set (one workspace): Socket Mode with SLACK_APP_TOKEN,
              otherwise HTTP mode with SLACK_SIGNING_SECRET on
              COMPANION_HTTP_HOST:COMPANION_HTTP_PORT at /slack/events; when SLACK_CLIENT_ID
              is set (any workspace that installs the app at /slack/install): HTTP mode
    HTTP      /healthz, /readyz, /metrics and the memory inspector (bot/web) on
              COMPANION_HTTP_HOST:COMPANION_HTTP_PORT (the same server as Slack's HTTP mode,
              when that runs)
    scheduler APScheduler ticks every minute: openers and upkeep that are due (claimed in
              Postgres, so several processes share the work), replies that failed to go out
              (retried until delivered), and pending events left by a crashed process; every
              hour, communities that removed the bot more than 30 days ago are erased

Slack hears "received" only for an event already stored (see adapters/slack). Right after
start, beside the new events, the bot finishes what a previous process left behind: its
pending events are handled and replies that never went out are sent.

SIGTERM or SIGINT: Slack takes no new requests (those in flight store their event first, up
to STORE_GRACE_SECONDS) and the scheduler starts no more jobs; then the turns, deliveries
and jobs in flight get the rest of GRACE_SECONDS, Discord's client staying connected
meanwhile (its replies go out through it; what it still receives is stored and handled like
the rest). A turn that does not finish in time stays pending in the database and resumes on
the next start.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

from aiohttp import ClientSession, web
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from adapters.common import Services
from bot.app import App
from bot.health import Health, serving
from bot.platforms import discord_running, slack_running
from bot.rights import PlatformRights
from bot.web.serve import http_routes, serving_ops
from core.ports import Metrics, Timer
from core.runtime.activity import Activity
from core.runtime.tick import tick

log = logging.getLogger(__name__)
GRACE_SECONDS = 30
STORE_GRACE_SECONDS = 10  # requests in flight only store their event: seconds at most
RESUME_EVERY_SECONDS = 10  # pending events, e.g. those that waited for a model that was down
RESUME_AT_ONCE = 4  # agents whose backlog is worked off side by side after a start
TICK_SECONDS = 60
RETENTION_SECONDS = 3600  # communities whose grace period is over are erased within the hour
REDELIVER_AFTER = timedelta(seconds=30)  # live handlers deliver within that; then we retry


def in_flight(
    activity: Activity, name: str, job: Callable[[], Coroutine[Any, Any, None]]
) -> Callable[[], Awaitable[None]]:
    """`job` for the scheduler, run as work in progress (`activity.start`): a stop waits for
    it as for a turn. The scheduler's shutdown cancels the jobs it is running; that left an
    opener or a backlog turn cut off midway, and an ERROR with a traceback in the log at
    every stop that met one. Now the shutdown cancels only the wait; the work goes on
    within the stop's grace (past it, it stays pending: `finish_in_flight`)."""

    async def run() -> None:
        task = activity.start(job(), name)
        with suppress(asyncio.CancelledError):  # the scheduler's shutdown
            await asyncio.shield(task)

    return run


@asynccontextmanager
async def scheduler_running(app: App) -> AsyncIterator[AsyncIOScheduler]:
    """The scheduler's jobs, each work in progress (`in_flight`); what they send goes
    through the engine's `Platforms`."""
    activity = app.engine.activity

    async def scheduler_pass() -> None:
        report = await tick(app.engine, app.engine.clock())
        if report.claimed:
            log.info(
                "tick: %d claimed, %d sent, %d silent, %d waiting for the model",
                len(report.claimed),
                report.sent,
                report.silent,
                report.waiting,
            )

    scheduler = AsyncIOScheduler(timezone="UTC")
    scheduler.add_job(
        in_flight(activity, "the scheduler's pass", scheduler_pass),
        "interval",
        seconds=TICK_SECONDS,
        id="tick",
        max_instances=1,
        coalesce=True,
    )

    async def redelivery() -> None:
        done, failing = await app.engine.outbox.redeliver(REDELIVER_AFTER)
        if done or failing:
            log.info("redelivered replies of %d events, %d still failing", done, failing)

    scheduler.add_job(
        in_flight(activity, "redelivery", redelivery),
        "interval",
        seconds=TICK_SECONDS,
        id="redeliver",
        max_instances=1,
        coalesce=True,
    )

    async def retention() -> None:
        for erased in await app.tenancy.erase_departed():
            log.info(
                "erased %s (%d members): its grace period is over", erased.tenant, erased.members
            )

    scheduler.add_job(
        in_flight(activity, "retention", retention),
        "interval",
        seconds=RETENTION_SECONDS,
        id="retention",
        max_instances=1,
    )

    async def backlog() -> None:
        if await app.engine.resume(at_once=RESUME_AT_ONCE):
            await app.engine.outbox.redeliver(timedelta(0))

    scheduler.add_job(
        in_flight(activity, "the backlog", backlog),
        "interval",
        seconds=RESUME_EVERY_SECONDS,
        id="resume",
        max_instances=1,
        coalesce=True,
    )
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(wait=False)


async def run(app: App, stop: asyncio.Event | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or `stop` is set); returns the exit status."""
    settings = app.settings
    settings.require_platform()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    services = Services(
        app.engine,
        app.members,
        settings.admin_ids,
        settings.welcome,
        access=app.access,
        community=app.community,
    )
    rights = PlatformRights()
    app.access.rights = rights  # admin sessions: re-checked with the platforms served here
    health = Health(app.sessions, app.metrics, app.engine.mind.health)
    host, port = settings.http_host, settings.http_port

    def serve_slack(bolt: Any) -> Any:  # Slack's HTTP mode: its events beside our routes
        from adapters.slack.signatures import watch_signatures  # Slack's modules: Slack only

        bolt_app = watch_signatures(bolt.web_app(path="/slack/events"), "/slack/events")
        routes = http_routes(bolt_app, app, health)
        routes.middlewares.append(acknowledged_first(app.engine.activity, app.metrics))
        return serving(routes, host, port, grace=STORE_GRACE_SECONDS)

    slack_http = settings.slack_over_http
    async with AsyncExitStack() as outlets:
        # Discord's client is how its replies go out: it closes last, after the turns.
        if settings.discord_token:
            await outlets.enter_async_context(discord_running(app, services, health, rights))
        # Slack's replies go out over these kept-alive connections: closed after the turns too.
        connections = None
        if settings.slack_bot_token:
            connections = await outlets.enter_async_context(ClientSession())
        async with AsyncExitStack() as inlets:
            if not slack_http:  # otherwise the routes go on Slack's server
                web_app = http_routes(web.Application(), app, health)
                await inlets.enter_async_context(serving(web_app, host, port))
            await inlets.enter_async_context(serving_ops(app, health))
            if settings.slack:
                await inlets.enter_async_context(
                    slack_running(app, services, health, serve_slack, connections, rights)
                )
            app.engine.activity.start(recover(app), "recovery after start")
            await inlets.enter_async_context(scheduler_running(app))
            health.started = True
            log.info("serving on %s:%s (health, inspector)", host, port)
            await stop.wait()
            health.started = False
            log.info("stopping: no new events; up to %ss for turns in flight", GRACE_SECONDS)
            deadline = loop.time() + GRACE_SECONDS
        await finish_in_flight(app, deadline)
    log.info("stopped")
    return 0


def acknowledged_first(activity: Activity, metrics: Metrics) -> Any:
    """Slack's requests count as received from the moment they arrive, before Bolt reads
    them: turns and deliveries give way to them until they are acknowledged. The time to
    each answer is `companion_acknowledgement_seconds` (Slack retries after 3 s)."""

    @web.middleware
    async def receiving(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST" or not request.path.startswith("/slack/"):
            return await handler(request)
        started = time.perf_counter()
        try:
            async with activity.receiving():
                return await handler(request)
        finally:
            metrics.observe(Timer.ACK, time.perf_counter() - started)

    return receiving


async def finish_in_flight(app: App, deadline: float) -> None:
    """Wait for the turns and deliveries in flight; past the deadline, they stay pending."""
    try:
        async with asyncio.timeout_at(deadline):
            await app.engine.wait_idle()
    except TimeoutError:
        log.warning(
            "turns still running after %ss stay pending and resume on next start", GRACE_SECONDS
        )
        await app.engine.activity.cancel()


async def recover(app: App) -> None:
    """What an earlier process left: its pending events (RESUME_AT_ONCE agents at a time,
    beside the new events), then every reply not yet sent."""
    resumed = await app.engine.resume(at_once=RESUME_AT_ONCE)
    done, failing = await app.engine.outbox.redeliver(timedelta(0))
    if resumed or done or failing:
        log.info(
            "after start: resumed %d agents; delivered %d events, %d failing",
            resumed,
            done,
            failing,
        )
