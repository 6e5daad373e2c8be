"""The campaign's Postgres faults: the server restarted under the running processes.

    Server.of(pg_url)            the local server behind a superuser URL, or None when it
                                 is not one this machine can restart (another host)
    server.restart(mode, down)   "fast" or "immediate": `pg_ctl stop -m MODE`, `down`
                                 seconds without a server, then started again with its own
                                 options (postmaster.opts); "kill": one client backend is
                                 SIGKILLed, so the postmaster ends every connection and
                                 recovers, as after a crash of a server process
    server.durable_commits()     meanwhile, commits are on disk before they are acknowledged
    server.stop_if_restarted()   stop the postmaster a restart started (the one that
                                 started the server knows only the first: it would leave
                                 this one running)

The server runs as its data directory's owner (the embedded one refuses to run as root),
so `pg_ctl` runs as that user too.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bot.database import asyncpg_url

MODES = ("fast", "immediate", "kill")
BACK_SECONDS = 60.0  # the most a restarted server may take to accept connections again


@dataclass(frozen=True)
class Server:
    url: str  # a superuser's, as asyncpg takes it
    pgdata: Path
    pg_ctl: Path
    first_pid: int  # the postmaster's when this was made

    @classmethod
    async def of(cls, pg_url: str) -> Server | None:
        url = _plain(pg_url)
        try:
            connection = await asyncpg.connect(url)
        except (OSError, asyncpg.PostgresError):
            return None
        try:
            pgdata = Path(await connection.fetchval("SHOW data_directory"))
        except asyncpg.PostgresError:  # not a superuser: not ours to restart
            return None
        finally:
            await connection.close()
        opts = pgdata / "postmaster.opts"
        if not opts.exists():
            return None
        postgres = Path(shlex.split(opts.read_text())[0])
        return cls(url, pgdata, postgres.with_name("pg_ctl"), _postmaster(pgdata))

    async def restart(self, mode: str, down: float) -> None:
        """Stop the server as `mode` says, then have it accept connections again."""
        if mode == "kill":
            await self._kill_a_backend()
        else:
            await asyncio.to_thread(self._pg_ctl, "stop", "-m", mode)
            await asyncio.sleep(down)
            await asyncio.to_thread(self._pg_ctl, "restart")  # not running: starts it
        await self._accepting()

    @asynccontextmanager
    async def durable_commits(self) -> AsyncIterator[None]:
        """Commits on disk before they are acknowledged, meanwhile: a test server may run
        with synchronous_commit off (tests/conftest.py), and a crash of the server then
        loses what Companion was told was stored (what is tried is Companion, not that)."""
        before = await self._set("synchronous_commit", "on")
        try:
            yield
        finally:
            await self._set("synchronous_commit", before)

    async def _set(self, name: str, value: str) -> str:
        connection = await asyncpg.connect(self.url)
        try:
            before = str(await connection.fetchval(f"SHOW {name}"))
            await connection.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            await connection.execute("SELECT pg_reload_conf()")
            return before
        finally:
            await connection.close()

    async def stop_if_restarted(self) -> None:
        if _postmaster(self.pgdata) not in (0, self.first_pid):
            await asyncio.to_thread(self._pg_ctl, "stop", "-m", "immediate")  # thrown away next

    def _pg_ctl(self, *args: str) -> None:
        owner = self.pgdata.stat().st_uid
        subprocess.run(
            [str(self.pg_ctl), "-D", str(self.pgdata), "-w", "-l", str(self._log()), *args],
            check=True,
            # Not pipes: a server it starts would hold them open (pg_ctl's output is in the log)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=BACK_SECONDS,
            user=owner if os.getuid() != owner else None,
        )

    def _log(self) -> Path:
        return self.pgdata / "restarts.log"  # where the server's owner may write

    async def _kill_a_backend(self) -> None:
        """SIGKILL one client backend; return once the postmaster has ended the others
        (this one's own connection among them) to recover."""
        witness = await asyncpg.connect(self.url)
        try:
            pid = await witness.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1"
            )
            os.kill(int(pid or await witness.fetchval("SELECT pg_backend_pid()")), signal.SIGKILL)
            deadline = time.monotonic() + BACK_SECONDS
            while time.monotonic() < deadline:
                await witness.fetchval("SELECT 1")
                await asyncio.sleep(0.1)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pass  # ended with the rest: the server is recovering
        finally:
            witness.terminate()

    async def _accepting(self) -> None:
        deadline = time.monotonic() + BACK_SECONDS
        while True:
            try:
                connection = await asyncpg.connect(self.url)
                await connection.close()
                return
            except (OSError, asyncpg.PostgresError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)


def _postmaster(pgdata: Path) -> int:
    """The running postmaster's pid (0: none)."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return 0


def _plain(url: str) -> str:
    """asyncpg's own form of a SQLAlchemy URL."""
    return asyncpg_url(url).replace("postgresql+asyncpg://", "postgresql://", 1)
