"""Serving the inspector: on `companion run`'s HTTP server, or alone with `companion web`.

http_routes(web_app, app, health)   the public port: health checks and the inspector (metrics
                                    and readiness details only with COMPANION_OPS_PUBLIC)
serving_ops(app, health)            the operator's listener on COMPANION_OPS_PORT, if set
serve_web(app)                      `companion web`: those on their ports, until SIGTERM or
                                    SIGINT
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AbstractAsyncContextManager, nullcontext, suppress

from aiohttp import web

from bot.app import App
from bot.health import Health, add_health_routes, ops_app, serving
from bot.web import Inspector, add_inspector

log = logging.getLogger(__name__)


def inspector_of(app: App) -> Inspector:
    secure = app.settings.base_url.startswith("https://")
    return Inspector(app.members, app.community, app.access, secure_cookies=secure)


def http_routes(web_app: web.Application, app: App, health: Health) -> web.Application:
    details = app.settings.ops_public
    return add_inspector(add_health_routes(web_app, health, details), inspector_of(app))


def serving_ops(app: App, health: Health) -> AbstractAsyncContextManager[None]:
    """/metrics and /readyz in full on COMPANION_HTTP_HOST:COMPANION_OPS_PORT; nothing
    when no port is set."""
    port = app.settings.ops_port
    if port is None:
        return nullcontext()
    log.info("operations (/readyz, /metrics) on %s:%s", app.settings.http_host, port)
    return serving(ops_app(health), app.settings.http_host, port)


async def serve_web(app: App, stop: asyncio.Event | None = None) -> int:
    """Serve the inspector (and /healthz, /readyz; /metrics on the operator's port) until
    told to stop."""
    settings = app.settings
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    health = Health(app.sessions, app.metrics)
    async with (
        serving(
            http_routes(web.Application(), app, health), settings.http_host, settings.http_port
        ),
        serving_ops(app, health),
    ):
        health.started = True
        log.info(
            "inspector on %s:%s, links to %s",
            settings.http_host,
            settings.http_port,
            settings.base_url,
        )
        await stop.wait()
        log.info("stopping")
        health.started = False
    log.info("stopped")
    return 0
