"""Health, readiness and metrics over HTTP, for orchestrators and Prometheus.

    GET /healthz   200 while the process serves requests at all
    GET /readyz    200 when the database answers `SELECT 1` within 2 s and every configured
                   platform is connected; otherwise 503 with {"ready": false, "reason": ...};
                   both carry "platforms": {name: {"state": ..., "detail": ...}} and "model":
                   {"state": ok | refused | no_functions, "detail": ...} (the endpoint as
                   the process has seen it: detail for the operator, not unreadiness)
    GET /metrics   the Prometheus text format (bot.observability.PrometheusMetrics)

The public port (the inspector's, Slack's events) answers /healthz, and /readyz with its
status code and {"ready": ...} alone: the reason, the platforms and the model name the
workspace, the invite link and the endpoint, which are the operator's. Those, and /metrics,
are served by `ops_app` on COMPANION_OPS_PORT (a listener of its own, kept off the public
network), or on the public port too when COMPANION_OPS_PUBLIC is set.

A platform's state is `starting`, `connected`, `retrying` (unreachable, or reconnecting:
it tries again by itself) or `refused` (its credentials or settings were turned down: an
operator must act). `Health.report` records each change and logs it in one line.

`add_health_routes` puts them on an existing aiohttp app (Slack's HTTP mode server);
`serving` runs an app on a host and port for as long as the context is open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.metrics import PrometheusMetrics
from core.errors import ConfigError
from core.wire.health import WireHealth

DATABASE_TIMEOUT = 2.0
log = logging.getLogger("companion.platforms")
# What a platform is on its way to (`starting`) shows in /readyz; the log says where it got.
LEVELS = {"connected": logging.INFO, "starting": logging.DEBUG, "retrying": logging.WARNING}


@dataclass(frozen=True)
class PlatformState:
    state: str  # starting | connected | retrying | refused
    detail: str


@dataclass
class Health:
    sessions: async_sessionmaker[AsyncSession]
    metrics: PrometheusMetrics
    wire: WireHealth = field(default_factory=WireHealth)  # the model endpoint, as seen so far
    started: bool = False  # set by `companion run` once it serves, cleared on stop
    platforms: dict[str, PlatformState] = field(default_factory=dict)

    def report(self, platform: str, state: str, detail: str) -> None:
        """A platform's new state; each change is one log line (refusals at ERROR)."""
        new = PlatformState(state, detail)
        if self.platforms.get(platform) == new:
            return
        self.platforms[platform] = new
        log.log(LEVELS.get(state, logging.ERROR), "%s: %s", platform, detail)

    async def problem(self) -> str | None:
        """Why the process is not ready, in a few words; None when it is."""
        try:
            async with asyncio.timeout(DATABASE_TIMEOUT), self.sessions() as session:
                await session.execute(text("SELECT 1"))
        except TimeoutError:
            return f"the database did not answer within {DATABASE_TIMEOUT:g} s"
        except Exception as error:
            return f"the database is unreachable: {type(error).__name__}: {error}"
        if not self.started:
            return "starting or stopping"
        waiting = [
            f"{name} {p.state}: {p.detail}"
            for name, p in self.platforms.items()
            if p.state != "connected"
        ]
        return "; ".join(waiting) or None

    def states(self) -> dict[str, dict[str, str]]:
        return {name: {"state": p.state, "detail": p.detail} for name, p in self.platforms.items()}

    def model(self) -> dict[str, str]:
        """The model endpoint: ok, refused (a setup error, with its fix) or no_functions (it
        seems not to call functions). Events are still stored and answered when it is fixed,
        so this is detail, not unreadiness."""
        state, detail = self.wire.state()
        return {"state": state, "detail": detail}


def add_health_routes(
    app: web.Application, health: Health, details: bool = True
) -> web.Application:
    """/healthz and /readyz on `app`; with `details`, /readyz in full and /metrics too."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def readyz(request: web.Request) -> web.Response:
        reason = await health.problem()
        if not details:
            return web.json_response({"ready": not reason}, status=503 if reason else 200)
        platforms, model = health.states(), health.model()
        if reason:
            body = {"ready": False, "reason": reason, "platforms": platforms, "model": model}
            return web.json_response(body, status=503)
        return web.json_response({"ready": True, "platforms": platforms, "model": model})

    async def metrics(request: web.Request) -> web.Response:
        body = await health.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if details:
        app.router.add_get("/metrics", metrics)
    return app


def ops_app(health: Health) -> web.Application:
    """The operator's listener: /healthz, /readyz in full, /metrics."""
    return add_health_routes(web.Application(), health, details=True)


@asynccontextmanager
async def serving(
    app: web.Application, host: str, port: int, grace: float = 60.0
) -> AsyncIterator[None]:
    """Serve `app` on host:port; on exit stop listening, then give the requests in flight up
    to `grace` seconds."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=grace)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as error:  # a port in use, a host that is not this machine's: a setting
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({error.strerror or error}); check "
            "COMPANION_HTTP_HOST, COMPANION_HTTP_PORT and COMPANION_OPS_PORT, or stop what "
            "uses that port"
        ) from None
    try:
        yield
    finally:
        await site.stop()
        await runner.cleanup()
