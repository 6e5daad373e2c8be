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

from bot.app import App, open_app
from bot.settings import Settings
from core.events import EventKind, InboundEvent
from core.ports import Posting, Send
from core.runtime.engine import Engine
from core.tenant_key import TenantKey

TENANT = "slack:TFAULT"  # a platform's: the redelivery sweep serves only those it reaches
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

    async def send(text: str, posting: Posting | None = None) -> None:
        await asyncio.to_thread(append_line, seen, text)
        await pause("sent")

    return send


async def talk(engine: Engine, text: str) -> None:
    scope = await engine.agent(TENANT, USER)
    event_id = await engine.submit(scope, InboundEvent(EventKind.USER_MESSAGE, text, f"m:{text}"))
    await pause("stored")
    await engine.drain(scope)
    await engine.outbox.deliver(scope, event_id, member_sees())


class Place:
    """The one place of these runs' platform (an `adapters.posting.Outlet`): `send` posts."""

    limit = 100_000

    def __init__(self, send: Send) -> None:
        self.send = send

    def markup(self, text: str) -> str:
        return text

    async def post(self, part: str, tag: Any) -> None:
        await self.send(part)

    async def posted(self, after: Any) -> list[Any]:
        return []  # it cannot be read back: a retry posts again


class Everywhere:
    """The platform's `Outlets`: every route leads to the one member of these runs."""

    def __init__(self, send: Send) -> None:
        self.send = send

    async def direct(self, tenant: str, user: str) -> Place:
        return Place(self.send)

    async def written(self, tenant: str, meta: dict[str, Any]) -> Place:
        return Place(self.send)


async def restart(app: App) -> None:
    engine = app.engine
    app.platforms.add(TenantKey.parse(TENANT).platform, Everywhere(member_sees()))
    resumed = await engine.resume()
    delivered, failing = await engine.outbox.redeliver(timedelta(0))
    print(f"resumed {resumed} agent(s); delivered {delivered} event(s), {failing} failing")


async def main(argv: list[str]) -> None:
    async with open_app(Settings.from_env(os.environ)) as app:
        if argv[0] == "talk":
            await talk(app.engine, argv[1])
        elif argv[0] == "restart":
            await restart(app)
        else:
            raise SystemExit(__doc__)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
