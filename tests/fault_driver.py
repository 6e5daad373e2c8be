"""A bot process for tests/test_faults.py: the engine's message path, with a file as platform.

    python -m tests.fault_driver talk TEXT   store TEXT as a member's message, handle, deliver
    python -m tests.fault_driver restart     what a bot does at start: resume, then redeliver

Settings come from the environment, as for `companion` (tests.conftest.cli_env). Like a
platform adapter it uses `Engine.submit`, `Engine.drain` and `Engine.deliver` with a send
function; the send function appends each reply as one line to $FAULT_SEEN, the file that
plays what the member sees in their chat.

So a test can SIGKILL the process at an exact point, $FAULT_PAUSE names a point where the
driver writes that name to $FAULT_MARK and then sleeps until it is killed:

    stored   the event is committed, the turn has not started (no model call yet)
    sent     inside send, after the reply line was written to $FAULT_SEEN (the platform has
             it) and before send returns, so before `deliver` commits `delivered_at`
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.app import open_app
from bot.settings import Settings
from core.events import EventKind, InboundEvent
from core.runtime.engine import Engine, Send

TENANT = "slack:TFAULT"  # not "local": the redelivery sweep only serves platform tenants
USER = "U1"


def write_mark(point: str) -> None:
    """Write the mark whole, then give it its name: a test that sees the file can read it."""
    mark = Path(os.environ["FAULT_MARK"])
    partial = mark.with_name(mark.name + ".partial")
    partial.write_text(point)
    partial.replace(mark)


async def pause(point: str) -> None:
    if os.environ.get("FAULT_PAUSE") == point:
        await asyncio.to_thread(write_mark, point)
        await asyncio.sleep(3600)  # until SIGKILL
        raise SystemExit(f"fault_driver: nobody killed me at {point!r}")


def append_line(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(text.replace("\n", " ") + "\n")


def member_sees() -> Send:
    seen = Path(os.environ["FAULT_SEEN"])

    async def send(text: str) -> None:
        await asyncio.to_thread(append_line, seen, text)
        await pause("sent")

    return send


async def talk(engine: Engine, text: str) -> None:
    scope = await engine.agent(TENANT, USER)
    event_id = await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, text, f"m:{text}"))
    await pause("stored")
    await engine.drain(scope)
    await engine.outbox.deliver(scope, event_id, member_sees())


class Everywhere:
    """A `Platforms` that sends every retried reply to the one member of these runs."""

    def __init__(self, send: Any) -> None:
        self.send = send

    def reply_route(self, tenant: str, user: str, meta: dict[str, Any]) -> Any:
        return self.send

    def direct(self, tenant: str, user: str) -> Any:
        return self.send


async def restart(engine: Engine) -> None:
    send = member_sees()
    resumed = await engine.resume()
    delivered, failing = await engine.outbox.redeliver(timedelta(0), Everywhere(send))
    print(f"resumed {resumed} agent(s); delivered {delivered} event(s), {failing} failing")


async def main(argv: list[str]) -> None:
    async with open_app(Settings.from_env(os.environ)) as app:
        if argv[0] == "talk":
            await talk(app.engine, argv[1])
        elif argv[0] == "restart":
            await restart(app.engine)
        else:
            raise SystemExit(__doc__)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
