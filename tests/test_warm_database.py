"""The embedded database stays up between short commands and stops once unused (issue 31,
finding 4: every command started and stopped it, 2-4 s each)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import shutil
import tempfile
import threading
from pathlib import Path

from bot import idle_stop
from tests.conftest import cli_env, companion

POLL = 0.25  # seconds between the idle stopper's looks, here


def stopper_watches(data: Path) -> bool:
    """Whether a `bot.idle_stop` holds the data directory's guard."""
    with open(data / idle_stop.GUARD, "a") as guard:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def idle_stop_while_in_use(data: Path, pid: int) -> threading.Thread:
    """A stopper with no idle time at all, while this process uses the server (shared
    lock): the server must outlive it, however many times it looks; the stopper goes on
    once the lock is gone. It looks every POLL s here (every 2 s deployed: the same code)."""
    with open(data / idle_stop.IN_USE, "a") as in_use:
        fcntl.flock(in_use, fcntl.LOCK_SH)
        watching = threading.Thread(target=idle_stop.watch, args=(data, 0.0, POLL))
        watching.start()
        watching.join(POLL * 10)
        assert watching.is_alive() and idle_stop.postmaster_pid(data) == pid, (
            "stopped while a command used it"
        )
    return watching


async def test_a_short_command_leaves_the_server_for_the_next_and_idle_stop_ends_it(fake, pg_url):
    data = Path(tempfile.mkdtemp(prefix="companion-warm-"))
    env = cli_env(fake, pg_url, COMPANION_DATA_DIR=str(data))
    del env["DATABASE_URL"]  # the embedded default
    try:
        first = await companion(env, "usage")
        assert first.code == 0, first.err
        pid = idle_stop.postmaster_pid(data)
        assert pid is not None, "the server waits for the next command"
        for _ in range(50):  # the stopper it started takes its guard
            if stopper_watches(data):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no idle stopper is watching the warm server")

        again = await companion(env, "openers", "list")
        assert again.code == 0 and again.out == "no openers scheduled\n", again
        assert idle_stop.postmaster_pid(data) == pid, "the same server, not a new one"

        watching = await asyncio.to_thread(idle_stop_while_in_use, data, pid)
        await asyncio.to_thread(watching.join, 30)
        assert idle_stop.postmaster_pid(data) is None, "unused: stopped"
        handles = (data / "postgres" / ".handle_pids.json").read_text()
        assert json.loads(handles) == []

        back = await companion(env, "usage")  # the next command starts it again
        assert back.code == 0, back.err
        assert idle_stop.postmaster_pid(data) not in (None, pid)
    finally:
        pid = idle_stop.postmaster_pid(data)
        if pid is not None:
            await asyncio.to_thread(idle_stop.stop_server, data, pid)
        shutil.rmtree(data, ignore_errors=True)
