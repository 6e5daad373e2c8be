"""The real processes of a campaign: `companion run` generations, imports, the sweep.

Generation   one `companion run` (python -m bot.cli run): its own FakeOpenAI server
             (so the ledger knows which process made each model call), its log file,
             how it ended (SIGKILL, SIGTERM and its exit status) and the usage the
             database held before and after it
Processes    starts a generation and waits until /readyz answers 200; kills or stops
             it; runs `companion import --replace` and the sweep (tests/chaos/sweep.py)
             as their own processes. Only one process that makes model calls runs at a
             time, so the database's usage grows only with the current generation's
             calls.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chaos.model import Brain
from tests.conftest import COMPANION, ROOT
from tests.fake_openai import FakeOpenAI

READY_SECONDS = 45.0
STOP_SECONDS = 45.0  # `companion run` gives turns 30 s after SIGTERM
DATABASE_BACK_SECONDS = 60.0  # the campaign restarts the database: its own reads wait


@dataclass
class Generation:
    name: str
    log: Path
    proc: asyncio.subprocess.Process | None = None
    model: FakeOpenAI | None = None
    ready: bool = False
    ended_by: str = ""  # "SIGKILL", "SIGTERM", or "" while running
    returncode: int | None = None
    usage_before: dict[int, int] = field(default_factory=dict)  # agent id -> tokens in `usage`
    usage_after: dict[int, int] = field(default_factory=dict)
    started: float = 0.0  # time.monotonic() of the spawn, /readyz 200, the signal
    ready_at: float = 0.0
    ended_at: float = 0.0
    wall: tuple[float, float] = (0.0, 0.0)  # time.time() at the spawn and after the exit
    problems: list[str] = field(default_factory=list)


def _database_failed(log: Path) -> bool:
    return "the database failed" in log.read_text(encoding="utf-8", errors="replace")


@dataclass
class ImportRun:
    member: str
    started: float
    ended: float = 0.0
    returncode: int | None = None
    stderr: str = ""


class Processes:
    def __init__(
        self, env: dict[str, str], http_port: int, brain: Brain, db: AsyncEngine, logs: Path
    ) -> None:
        self.env = env
        self.http_port = http_port
        self.brain = brain
        self.db = db
        self.logs = logs
        self.generations: list[Generation] = []
        self.imports: list[ImportRun] = []
        self._stopping: list[asyncio.Task] = []  # fake models finishing their hung answers
        # Cleared while the campaign restarts the database: a process is started once it is
        # back, as a supervisor would start it again (what is tried is the running ones).
        self.database_up = asyncio.Event()
        self.database_up.set()
        self.database_restarts = 0  # how many have begun

    async def usage(self) -> dict[int, int]:
        """Tokens in `usage`, per agent (all days); asked again while the database restarts."""
        deadline = time.monotonic() + DATABASE_BACK_SECONDS
        while True:
            try:
                async with self.db.connect() as conn:
                    query = text("SELECT agent_id, sum(tokens) FROM usage GROUP BY 1")
                    rows = await conn.execute(query)
                    return {int(agent): int(tokens) for agent, tokens in rows}
            except (DBAPIError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)

    async def _spawn(self, name: str, args: list[str], module: list[str]) -> Generation:
        gen = Generation(name, self.logs / f"{name}.log", started=time.monotonic())
        gen.wall = (time.time(), 0.0)
        gen.usage_before = await self.usage()
        gen.model = FakeOpenAI(self.brain.for_generation(name), embedding_dim=16)
        await gen.model.start()
        env = {**self.env, "OPENAI_BASE_URL": gen.model.base_url}
        log = gen.log.open("wb")
        gen.proc = await asyncio.create_subprocess_exec(
            *module,
            *args,
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
        )
        log.close()
        self.generations.append(gen)
        return gen

    async def start(self, name: str) -> Generation:
        """A `companion run`, ready; one that stopped at start because the campaign was
        restarting the database (it says the database failed) is started again."""
        for attempt in range(3):
            await self.database_up.wait()
            restarts = self.database_restarts
            gen = await self._spawn(
                name if not attempt else f"{name}.{attempt}", ["run"], COMPANION
            )
            gen.ready, last = await self._wait_ready(gen)
            gen.ready_at = time.monotonic()
            met_restart = self.database_restarts != restarts or not self.database_up.is_set()
            if gen.ready or not (met_restart and _database_failed(gen.log)):
                break
            gen.ended_by, gen.ended_at, gen.returncode = (
                "exit",
                gen.ready_at,
                gen.proc.returncode if gen.proc else None,
            )
            gen.wall = (gen.wall[0], time.time())
            gen.usage_after = await self.usage()
            self._stop_model(gen)
        if not gen.ready:
            gen.problems.append(f"{gen.name} not ready within {READY_SECONDS:g} s ({last})")
        return gen

    async def _wait_ready(self, gen: Generation) -> tuple[bool, str]:
        """Whether /readyz answered 200 in time, and its last answer."""
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        deadline = time.monotonic() + READY_SECONDS
        last = "no answer"
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                assert gen.proc is not None
                if gen.proc.returncode is not None:
                    return False, f"exited with status {gen.proc.returncode}"
                try:
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                        if r.status == 200:
                            return True, "ready"
                        last = f"HTTP {r.status}: {(await r.text())[:160]}"
                except (aiohttp.ClientError, TimeoutError) as error:
                    last = type(error).__name__
                await asyncio.sleep(0.1)
        return False, last

    async def end(self, gen: Generation, kill: bool) -> None:
        """SIGKILL, or SIGTERM and wait for a clean exit; then note the usage after it."""
        proc = gen.proc
        assert proc is not None
        gen.ended_by = "SIGKILL" if kill else "SIGTERM"
        gen.ended_at = time.monotonic()
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        except TimeoutError:
            gen.problems.append(f"{gen.name} still running {STOP_SECONDS:g} s after SIGTERM")
            proc.kill()
            await proc.wait()
        gen.returncode = proc.returncode
        gen.wall = (gen.wall[0], time.time())
        if not kill and proc.returncode != 0:
            gen.problems.append(f"{gen.name} exited with status {proc.returncode} on SIGTERM")
        gen.usage_after = await self.usage()
        self._stop_model(gen)

    def _stop_model(self, gen: Generation) -> None:
        """In the background: a hung answer ('timeout' fault) would hold up the next start."""
        assert gen.model is not None
        self._stopping.append(asyncio.create_task(gen.model.stop()))

    async def close(self) -> None:
        """Kill what still runs (a campaign that failed half-way), stop the fake models."""
        for gen in self.generations:
            if gen.proc is not None and gen.proc.returncode is None:
                gen.proc.kill()
                await gen.proc.wait()
                self._stop_model(gen)
        await asyncio.gather(*self._stopping)

    async def sweep(self) -> Generation:
        """The product's scheduled jobs, run once now in their own process (see sweep.py)."""
        gen = await self._spawn("sweep", [], [*COMPANION[:1], "-m", "tests.chaos.sweep"])
        assert gen.proc is not None
        try:
            await asyncio.wait_for(gen.proc.wait(), 120)
        except TimeoutError:
            gen.proc.kill()
            await gen.proc.wait()
        gen.ended_by, gen.returncode = "exit", gen.proc.returncode
        gen.wall = (gen.wall[0], time.time())
        if gen.returncode != 0:
            gen.problems.append(f"the sweep exited with status {gen.returncode}")
        gen.usage_after = await self.usage()
        self._stop_model(gen)
        return gen

    async def run_import(self, mid: str, tenant: str, user: str, doc: dict[str, Any]) -> ImportRun:
        """`companion import FILE --tenant T --user U --replace`, as an operator runs it."""
        path = self.logs / f"import-{mid}-{len(self.imports)}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        run = ImportRun(mid, time.monotonic())
        self.imports.append(run)
        # Its own model server: the import embeds what it restores (it makes no chat call;
        # one would be in the ledger under this name).
        model = FakeOpenAI(self.brain.for_generation(f"import{len(self.imports)}"), 16)
        await model.start()
        try:
            proc = await self._import_process(path, tenant, user, model.base_url)
            _, err = await proc.communicate()
        finally:
            self._stopping.append(asyncio.create_task(model.stop()))
        run.ended, run.returncode, run.stderr = time.monotonic(), proc.returncode, err.decode()
        return run

    async def _import_process(
        self, path: Path, tenant: str, user: str, model_url: str
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *COMPANION,
            "import",
            str(path),
            "--tenant",
            tenant,
            "--user",
            user,
            "--replace",
            env={**self.env, "OPENAI_BASE_URL": model_url},
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
