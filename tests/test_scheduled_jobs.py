"""bot/run.py's scheduler jobs are work in progress: a stop (the scheduler's shutdown) waits
for a job midway as for a turn, instead of cancelling it. Found under load by
test_acknowledged and the chaos seed: the backlog job was cut off in a redelivery or a turn
at every stop that met one, and APScheduler logged that as an ERROR with a traceback."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.run import in_flight
from core.runtime.activity import Activity


async def test_a_job_midway_at_the_schedulers_shutdown_finishes_and_logs_no_error(caplog):
    activity = Activity()
    began, go_on = asyncio.Event(), asyncio.Event()
    done = []

    async def backlog() -> None:
        began.set()
        await go_on.wait()
        done.append("delivered")

    scheduler = AsyncIOScheduler(timezone="UTC")
    job = in_flight(activity, "the backlog", backlog)
    scheduler.add_job(job, "interval", seconds=3600, next_run_time=datetime.now(UTC))
    with caplog.at_level(logging.INFO):
        scheduler.start()
        await asyncio.wait_for(began.wait(), 10)
        scheduler.shutdown(wait=False)  # what a stop does: it cancels the jobs it runs
        with pytest.raises(TimeoutError):  # the stop waits for the job (`finish_in_flight`)
            await asyncio.wait_for(activity.idle(), 0.3)
        go_on.set()
        await asyncio.wait_for(activity.idle(), 10)
    assert done == ["delivered"]
    noted = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noted, noted


async def test_a_job_that_fails_is_logged_once_with_its_name(caplog):
    activity = Activity()

    async def retention() -> None:
        raise RuntimeError("the database said no")

    with caplog.at_level(logging.INFO):
        await in_flight(activity, "retention", retention)()
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in failed] == ["retention failed"]
    assert failed[0].exc_info and "the database said no" in str(failed[0].exc_info[1])
