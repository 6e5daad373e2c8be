"""Serving the inspector: on `companion run`'s HTTP server, or alone with `companion web`.

http_routes(web_app, app, health)   health checks, metrics and the inspector on one app
serve_web(app)                      `companion web`: that app on the host and port, until
                                    SIGTERM or SIGINT
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import suppress

from aiohttp import web

from bot.app import App
from bot.health import Health, add_health_routes, serving
from bot.web import Inspector, add_inspector

log = logging.getLogger(__name__)


def inspector_of(app: App) -> Inspector:
    secure = app.settings.base_url.startswith("https://")
    return Inspector(app.members, app.community, app.access, secure_cookies=secure)


def http_routes(web_app: web.Application, app: App, health: Health) -> web.Application:
    return add_inspector(add_health_routes(web_app, health), inspector_of(app))


async def serve_web(app: App, stop: asyncio.Event | None = None) -> int:
    """Serve the inspector (and /healthz, /readyz, /metrics) until told to stop."""
    settings = app.settings
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    health = Health(app.sessions, app.metrics)
    async with serving(
        http_routes(web.Application(), app, health), settings.http_host, settings.http_port
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
