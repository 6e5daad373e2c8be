"""The end of a campaign: `companion run`'s scheduled jobs, each run once, now.

    python -m tests.chaos.sweep      (settings from the environment, as for `companion`)

`companion run` retries what is left over on a timer: pending events every minute
(`Engine.resume`), replies that did not go out every minute once they are 30 s old
(`REDELIVER_AFTER`), and the scheduler pass. A campaign cannot wait minutes per seed, so
this process builds the same jobs with `bot.run.scheduler_running` (the product's code:
whatever jobs it registers) and the REST-only platforms `companion tick` uses, and calls each
job once, resume first. The only difference from the timer: the ages after which the
product takes over work another process may still be doing (`AGE_LIMITS`, those that
exist) are set to 0, because no other process is running.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from datetime import timedelta

import bot.run as run_module
from bot.app import open_app
from bot.observability import configure_logging, log_options
from bot.operator import rest_platforms
from bot.settings import Settings

FIRST = ("resume", "redeliver")
# (module, name): replies older than this are retried; held events older than this released
AGE_LIMITS = [("bot.run", "REDELIVER_AFTER"), ("core.runtime.engine", "HOLD_LIMIT")]


def no_age_limits() -> None:
    assert hasattr(run_module, "REDELIVER_AFTER"), "bot.run no longer has REDELIVER_AFTER"
    for module, name in AGE_LIMITS:
        owner = importlib.import_module(module)
        if hasattr(owner, name):
            setattr(owner, name, timedelta(0))


async def main() -> None:
    no_age_limits()
    settings = Settings.from_env(os.environ)
    async with (
        open_app(settings) as app,
        rest_platforms(app),
        run_module.scheduler_running(app) as scheduler,
    ):
        jobs = sorted(scheduler.get_jobs(), key=lambda j: FIRST.index(j.id) if j.id in FIRST else 9)
        for job in jobs:
            await job.func()


if __name__ == "__main__":
    configure_logging(*log_options(os.environ, "run"))
    asyncio.run(main())
