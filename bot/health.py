"""Health, readiness and metrics over HTTP, for orchestrators and Prometheus.

    GET /healthz   200 while the process serves requests at all
    GET /readyz    200 when the database answers `SELECT 1` within 2 s and the platforms
                   have started; otherwise 503 with {"ready": false, "reason": ...}
    GET /metrics   the Prometheus text format (bot.observability.PrometheusMetrics)

`add_health_routes` puts them on an existing aiohttp app (Slack's HTTP mode server);
`serving` runs an app on a host and port for as long as the context is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.observability import PrometheusMetrics

DATABASE_TIMEOUT = 2.0


@dataclass
class Health:
    sessions: async_sessionmaker[AsyncSession]
    metrics: PrometheusMetrics
    started: bool = False  # set by `companion run` once every platform is up, cleared on stop

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
            return "the platforms are not connected (starting or stopping)"
        return None


def add_health_routes(app: web.Application, health: Health) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def readyz(request: web.Request) -> web.Response:
        reason = await health.problem()
        if reason:
            return web.json_response({"ready": False, "reason": reason}, status=503)
        return web.json_response({"ready": True})

    async def metrics(request: web.Request) -> web.Response:
        body = await health.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


@asynccontextmanager
async def serving(app: web.Application, host: str, port: int) -> AsyncIterator[None]:
    """Serve `app` on host:port; on exit stop listening, then finish requests in flight."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        yield
    finally:
        await site.stop()
        await runner.cleanup()
