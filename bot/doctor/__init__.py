"""`companion doctor`: check what a deployment needs and say plainly what is wrong.

    settings   the environment parses
    database   reachable (embedded or DATABASE_URL), migrations at head
    pgvector   the extension's version, the embedding dimension recorded in `meta`
    row-level security   a member's transaction, probed as Companion serves the database:
               the policies bind it, also after a `RESET ROLE`
    model      a one-token chat completion; the embedding model and its dimension, when set
    Slack      auth.test with SLACK_BOT_TOKEN; the Socket Mode token or HTTP-mode secret
    Discord    GET /users/@me with DISCORD_TOKEN; the privileged intents the bot needs

Each check prints one line, `ok  …`, `warn …` (works, but weaker than it should be) or
`FAIL …`, with what to do about it, and a last line counts them. Nothing is changed
anywhere (no migrations, no messages; probes roll back). Exit status 0 when no line is FAIL.

The settings line comes first, before the checks' imports (openai, aiohttp); then the
checks run at once (the database, the model endpoint, the local embedding model, the
platforms: each mostly waits on a server or loads a file), and their lines come in this
order as each is known: the doctor takes as long as its slowest check, not their sum.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TextIO

from bot.doctor.results import Result, fail, ok
from bot.doctor.results import why as _why
from bot.observability import log_options
from bot.settings import Settings
from core.errors import CompanionError

__all__ = ["run_doctor"]

# The checks, in the order their lines are printed: (module, function). Each module is
# imported in a thread once the first line is out (openai alone is most of a second), so
# the database check starts meanwhile.
CHECKS = (
    ("bot.doctor.database", "check_database"),
    ("bot.doctor.model", "check_model"),
    ("bot.doctor.embedder", "check_local_embedder"),
    ("bot.doctor.platforms", "check_platforms"),
)


def check_settings(env: Mapping[str, str]) -> tuple[Settings | None, Result]:
    try:
        settings = Settings.from_env(env)
        log_options(env, "run")
    except CompanionError as error:
        return None, fail(f"settings: {error}")
    return settings, ok("settings: the environment parses")


def summary(results: list[Result]) -> str:
    """The last line: how many of each, and what follows from them."""
    levels = [r.level for r in results]
    warnings, failures = levels.count("warn"), levels.count("FAIL")
    counts = (
        f"doctor: {levels.count('ok')} ok, {warnings} warning{'s' * (warnings != 1)}, "
        f"{failures} failure{'s' * (failures != 1)}"
    )
    if failures:
        return f"{counts}: fix the FAIL lines above"
    if warnings:
        return f"{counts}: it works; the warn lines say what would make it better"
    return f"{counts}: ready"


async def run_doctor(env: Mapping[str, str], out: TextIO) -> int:
    """Print one line per check and a summary; 0 when no line is FAIL, 1 otherwise."""
    settings, result = check_settings(env)
    print(result.line(), file=out, flush=True)
    results = [result]
    if settings is None:
        print(summary(results), file=out, flush=True)
        return 1
    running = [asyncio.ensure_future(_found(*check, settings)) for check in CHECKS]
    for task in running:
        found = await task
        for result in found:
            print(result.line(), file=out, flush=True)
        results += found
    print(summary(results), file=out, flush=True)
    return 0 if all(r.ok for r in results) else 1


async def _found(module: str, name: str, settings: Settings) -> list[Result]:
    try:
        check: Callable[[Settings], Awaitable[list[Result]]] = getattr(
            await asyncio.to_thread(importlib.import_module, module), name
        )
        return await check(settings)
    except Exception as error:  # a check that broke is a finding too, never a traceback
        return [fail(f"{name.removeprefix('check_')}: {_why(error)}")]
