"""One member's message, from any platform into the engine: stored first, the rest after.

    admitted(...)       whether the companion answers it at all (where it was written,
                        who wrote it): the admins' rules, before anything is stored
    message_event(...)  the member's words as an engine event; with files, it names them
    take(...)           store it (held while files come) before the platform hears
                        "received" and before any lookup, reaction or model call
    store_message(...)  the author's agent, then `take`; a message too large to store is
                        refused, the member told why
    store_welcome(...)  a new member's welcome, as their agent's user action (when the
                        community's welcomes are on); the adapter sends it by DM
    follow_up(...)      afterwards: each file (a picture is looked at by the model, and
                        what it saw goes with the words), then the words, then the answer

A file that fails, whatever the reason (refused, a download that breaks, the platform
rate-limiting the reply about it), costs only that file: the member is told which one and
why, and the other files and the words beside them go on. A reply that could not be sent
stays in the outbox, which retries it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adapters.common import Services
from core.companion import Where
from core.errors import EventTooLarge, Refused
from core.events import EventKind, InboundEvent
from core.memory.documents import check_upload
from core.ports import Posting, Send
from core.runtime.engine import Engine
from core.runtime.intake import Admit
from core.runtime.pictures import check_picture, is_picture
from core.runtime.reconnect import unreachable
from core.scope import Scope

log = logging.getLogger(__name__)
FILE_FAILED = "Something went wrong while I read {name}; please share it again."


@dataclass(frozen=True)
class SharedFile:
    name: str
    size: int  # as the platform states it: checked before anything is downloaded
    dedup_key: str  # the platform's id for the file
    read: Callable[[], Awaitable[bytes]]  # the download; UploadRejected says what went wrong
    meta: dict[str, Any] = field(default_factory=dict)


def message_event(
    text: str,
    dedup_key: str,
    meta: dict[str, Any],
    files: list[SharedFile],
    written_at: datetime | None = None,
) -> InboundEvent:
    """The words (may be empty beside files); a held message names its files, so that
    the agent hears which ones never came if their fetcher dies. `written_at`, the
    platform's time of it: a message from before its member's erase is not taken."""
    if files:
        meta = {**meta, "files": [f.name for f in files]}
    return InboundEvent(EventKind.USER_MESSAGE, text, dedup_key, meta, written_at)


async def admitted(services: Services, tenant: str, user: str, where: Where, tell: Send) -> bool:
    """Whether the companion answers this message (its admins' rules: where it speaks, who
    is blocked); when not, the member is told what they need to know, if anything."""
    verdict = await services.members.admission.admit(tenant, user, where)
    if verdict.notice:
        await never_failing(tell)(verdict.notice)
    return verdict.answer


async def take(engine: Engine, scope: Scope, event: InboundEvent, has_files: bool) -> int:
    """Store the message; with files it waits for them (`Engine.release`)."""
    return await engine.submit(scope, event, hold=has_files)


async def store_message(
    engine: Engine,
    tenant: str,
    user: str,
    name: str | None,
    event: InboundEvent,
    has_files: bool,
    tell: Send,
    admit: Admit | None = None,
) -> tuple[Scope, int] | None:
    """The author's agent and their message stored in it, in one transaction (`Engine.take`:
    what a platform's acknowledgement waits for): (scope, event id); None for a message too
    large to store, or one the admins' rules refuse (`admit`, asked first in the same
    transaction), whose author is told what they need to know through `tell`."""
    try:
        taken = await engine.take(tenant, user, event, has_files, admit, name)
    except EventTooLarge as error:
        await never_failing(tell)(str(error))
        return None
    if taken.scope is None or taken.event_id is None:
        if taken.admitted.notice:
            await never_failing(tell)(taken.admitted.notice)
        return None
    return taken.scope, taken.event_id


async def store_welcome(
    services: Services,
    tenant: str,
    user: str,
    name: str,
    dedup_key: str,
    display_name: str | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[Scope, int] | None:
    """A member who joined: the welcome their companion is asked to write, stored as a
    user action of their agent, (scope, event id); None when the community's welcomes are
    off. `dedup_key` is the platform's id of the join: a join sent twice is welcomed once."""
    asked = await services.welcome_event(tenant, name)
    if asked is None:
        return None
    engine = services.engine
    scope = await engine.agent(tenant, user, display_name)
    event = InboundEvent(EventKind.USER_ACTION, asked, dedup_key, meta or {})
    return scope, await engine.submit(scope, event)


def never_failing(send: Send) -> Send:
    """For telling the member what went wrong: a failure to tell is logged, not raised."""

    async def tell(text: str, posting: Posting | None = None) -> None:
        try:
            await send(text, posting)
        except Exception:
            log.warning("could not tell the member: %s", text, exc_info=True)

    return tell


async def take_file(engine: Engine, scope: Scope, file: SharedFile, send: Send) -> None:
    """One file into archival memory and its reply out; any failure is told, not raised."""
    tell = never_failing(send)
    try:
        check_upload(file.name, file.size)
        data = await file.read()
        event_id, _ = await engine.store_file(scope, file.name, data, file.dedup_key, file.meta)
    except Refused as error:
        await tell(str(error))
        return
    except Exception as error:
        if unreachable(error):  # the database went away: the caller waits and tries again
            raise
        log.warning("file %s (%s) was not stored", file.name, file.dedup_key, exc_info=True)
        await tell(FILE_FAILED.format(name=file.name))
        return
    try:
        await engine.answer(scope, event_id, send)
    except Exception:  # stored; its reply waits in the outbox for the next attempt
        log.warning("the reply to file %s is not out yet", file.dedup_key, exc_info=True)


async def take_picture(
    engine: Engine, scope: Scope, event_id: int, file: SharedFile, send: Send
) -> str | None:
    """One picture looked at; what the agent reads of it beside the words (None: it was
    refused, and the member told why). Any failure is told, not raised."""
    tell = never_failing(send)
    try:
        check_picture(file.name, file.size)
        data = await file.read()
        seen = await engine.pictures.see(scope, file.name, data, file.dedup_key, event_id)
    except Refused as error:
        await tell(str(error))
        return None
    except Exception:
        log.warning("picture %s was not looked at", file.dedup_key, exc_info=True)
        await tell(FILE_FAILED.format(name=file.name))
        return None
    if seen.notice:
        await tell(seen.notice)
    return seen.note


async def follow_up(
    engine: Engine, scope: Scope, event_id: int, files: list[SharedFile], send: Send
) -> None:
    """The files first (the agent reads them before the words beside them; what it saw in
    pictures goes with the words), then the words."""
    notes = []
    for file in files:
        if is_picture(file.name):
            notes.append(await take_picture(engine, scope, event_id, file, send))
        else:
            await take_file(engine, scope, file, send)
    if files:
        await engine.release(scope, event_id, "\n\n".join(n for n in notes if n) or None)
    await engine.answer(scope, event_id, send)
