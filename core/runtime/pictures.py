"""Pictures members share: shown to the model once, remembered as its own description.

    picture_kind(name, data)   PNG, JPEG, WebP or GIF by their first bytes, else refused
    Pictures.see(scope, ...)   Seen: the note the agent reads beside the member's words, and
                               what to tell the member (once) when the model sees no pictures

When the deployment's model takes pictures (`COMPANION_VISION`: `on`; `auto` until the
endpoint first refuses one, which is remembered in `meta`), the picture goes to the model
as an image part (low detail: 85 tokens) in a call of its own that asks for a short
description. The description is kept in archival memory with its source (the picture's
name), so it is found again months later; the picture's bytes are never stored. Each
picture is recorded once as a done event (dedup key: the platform's id of the file), so a
redelivered message is not described twice. Where the model sees no pictures, the agent
reads that one was shared and the member is told once, kindly; the words go on. A member
or community whose budget for the day is spent gets no description call either.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import within_ceilings
from core.errors import ImagesRefused, PictureRefused, UploadRejected
from core.events import EventKind, EventStatus, InboundEvent, clean_text
from core.memory.documents import upload_name
from core.memory.mind import CallPurpose, CallUsage, Mind
from core.memory.store import AgentStore
from core.models import Agent, Event, Meta, Tenant, User
from core.ports import Counter
from core.runtime.budgets import over_budget
from core.scope import Scope, enter_scope

log = logging.getLogger(__name__)

MAX_PICTURE_BYTES = 5 * 1024 * 1024
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
MAX_DESCRIPTION_CHARS = 1200
DESCRIBE = (
    "A person you talk with shared this picture. Describe what it shows in two or three "
    "plain sentences: the main subject, any people or animals, the setting, any text in "
    "it. Say only what you see."
)
SEEN_NOTE = (
    "[The person shared a picture, {name!r}. You looked at it; it shows: {description} "
    "(kept in archival memory with source {source!r}.)]"
)
UNSEEN_NOTE = (
    "[The person shared a picture, {name!r}, but you cannot see pictures here; they were "
    "told so. Answer their words.]"
)
NOT_LOOKED = "[The person shared a picture, {name!r}; today's budget left no room to look at it.]"
NO_PICTURES = (
    "I can't see pictures here, sorry: the model I run on reads only text. If you tell me "
    "in words what {name} shows, I'll happily remember it."
)
BROKEN = "I could not open {name} as a picture: it may be damaged. Could you share it again?"
TOLD = "told_no_pictures"  # in the member's settings: told once


@dataclass(frozen=True)
class Vision:
    """Whether the model is shown pictures: `on`, `off`, or `auto` (until it refuses one)."""

    mode: str = "auto"
    model: str = ""  # what the endpoint's answer is remembered for

    @property
    def key(self) -> str:
        return f"vision:{self.model}"


@dataclass(frozen=True)
class Seen:
    note: str  # what the agent reads beside the member's words
    notice: str | None = None  # what the member is told, if anything


def picture_kind(name: str, data: bytes) -> str:
    """The picture's MIME type from its first bytes; `UploadRejected` if it is none of ours."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    raise UploadRejected(f"{name} is not a PNG, JPEG, WebP or GIF picture I can open")


def is_picture(name: str) -> bool:
    return PurePath(name).suffix.lower() in PICTURE_SUFFIXES


def check_picture(name: str, size: int) -> None:
    """Before the download: the size the platform states."""
    if size > MAX_PICTURE_BYTES:
        most = MAX_PICTURE_BYTES // 1_000_000
        raise UploadRejected(f"{name} is {size / 1e6:.1f} MB; the most I take is {most} MB")


class Pictures:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        mind: Mind,
        clock: Callable[[], datetime],
        vision: Vision,
    ) -> None:
        self.sessions, self.mind, self.clock, self.vision = sessions, mind, clock, vision
        self._sees: bool | None = None if vision.mode == "auto" else vision.mode == "on"

    async def sees(self) -> bool:
        """Whether to show the model pictures (auto: until it refused one, remembered)."""
        if self._sees is None:
            async with self.sessions() as session:
                known = await session.scalar(select(Meta.value).where(Meta.key == self.vision.key))
            if known is not None:
                self._sees = known == "yes"
        return self._sees is not False

    async def _learn(self, sees: bool) -> None:
        if self.vision.mode != "auto" or self._sees is sees:
            return
        self._sees = sees
        value = "yes" if sees else "no"
        async with self.sessions() as session, session.begin():
            await session.execute(
                insert(Meta)
                .values(key=self.vision.key, value=value)
                .on_conflict_do_update(index_elements=[Meta.key], set_={"value": value})
            )
        if not sees:
            log.warning(
                "the model %s refused a picture: pictures are not shown to it from now on "
                "(COMPANION_VISION=on to try again)",
                self.vision.model,
            )

    async def see(
        self, scope: Scope, filename: str, data: bytes, dedup_key: str, event_id: int
    ) -> Seen:
        """Look at one picture shared with the message `event_id`; nothing is raised but
        `UploadRejected` (not a picture, too big)."""
        name = upload_name(filename)
        check_picture(name, len(data))
        kind = picture_kind(name, data)
        known = await self._recorded(scope, dedup_key)
        if known is not None:
            return Seen(known)
        if not await self.sees():
            return await self._unseen(scope, name)
        if await self._over_budget(scope):
            return Seen(NOT_LOOKED.format(name=name))
        try:
            description, usage = await self._describe(name, kind, data)
        except ImagesRefused as refused:
            log.info("picture %s of agent %s: %s", dedup_key, scope.agent_id, refused)
            await self._learn(False)
            return await self._unseen(scope, name)
        except PictureRefused as refused:  # this picture, not the endpoint
            log.info("picture %s of agent %s: %s", dedup_key, scope.agent_id, refused)
            raise UploadRejected(BROKEN.format(name=name)) from refused
        await self._learn(True)
        source = f"picture {name}"
        note = SEEN_NOTE.format(name=name, description=description, source=source)
        day = self.clock().strftime("%Y-%m-%d")
        kept = f"Picture {name!r} the person shared on {day}: {description}"
        await self._record(scope, dedup_key, event_id, note, source, kept, usage)
        return Seen(note)

    async def _describe(self, name: str, kind: str, data: bytes) -> tuple[str, CallUsage]:
        url = f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
        parts = [
            {"type": "text", "text": f"The picture {name!r}."},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        ]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": DESCRIBE},
            {"role": "user", "content": parts},
        ]
        completion = await self.mind.model.complete(messages, None, 300)
        text = " ".join(clean_text(completion.content or "").split())[:MAX_DESCRIPTION_CHARS]
        usage = CallUsage(
            CallPurpose.PICTURE,
            completion.prompt_tokens or 0,
            completion.cached_tokens or 0,
            completion.completion_tokens or 0,
        )
        metrics = self.mind.metrics  # the operator's counters count every model call
        metrics.count(Counter.PROMPT_TOKENS, usage.prompt_tokens)
        metrics.count(Counter.CACHED_TOKENS, usage.cached_tokens)
        metrics.count(Counter.COMPLETION_TOKENS, usage.completion_tokens)
        return text or "(nothing it could make out)", usage

    async def _over_budget(self, scope: Scope) -> bool:
        """Today's budget of the member or their community is spent (their limits too)."""
        async with self.sessions() as session:
            settings = await session.scalar(
                select(Tenant.settings).where(Tenant.id == scope.tenant_id)
            )
            config = within_ceilings(self.mind.config, (settings or {}).get("limits"))
            return await over_budget(session, scope, self.clock().date(), config) is not None

    async def _recorded(self, scope: Scope, dedup_key: str) -> str | None:
        """The note of a picture already seen (a redelivered message), if any."""
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            payload = await session.scalar(
                select(Event.payload).where(
                    Event.tenant_id == scope.tenant_id,
                    Event.agent_id == scope.agent_id,
                    Event.dedup_key == dedup_key,
                )
            )
        return str(payload["text"]) if payload else None

    async def _record(
        self,
        scope: Scope,
        dedup_key: str,
        event_id: int,
        note: str,
        source: str,
        kept: str,
        usage: CallUsage,
    ) -> None:
        """The picture's done event, its description in archival memory, the call's cost."""
        now, embedder = self.clock(), self.mind.embedder
        vector = (await embedder.embed([kept]))[0] if embedder else None  # before the lock
        record = InboundEvent(EventKind.USER_ACTION, note, dedup_key, {"picture_of": event_id})
        async with self.sessions() as session, session.begin():
            await enter_scope(session, scope)
            new = await session.scalar(
                insert(Event)
                .values(
                    tenant_id=scope.tenant_id,
                    agent_id=scope.agent_id,
                    kind=str(record.kind),
                    payload=record.payload(),
                    dedup_key=dedup_key,
                    status=EventStatus.DONE,
                    created_at=now,
                    processed_at=now,
                )
                .on_conflict_do_nothing(
                    index_elements=[Event.tenant_id, Event.agent_id, Event.dedup_key]
                )
                .returning(Event.id)
            )
            if new is None:
                return  # another delivery of the same message kept it first
            store = AgentStore(session, scope, self.mind.config.max_message_tokens)
            await store.add_passage(kept, now, source, vector, int(new))
            await store.add_usage(
                now.date(),
                usage.prompt_tokens + usage.completion_tokens,
                1,
                usage.cached_tokens,
                usage.completion_tokens,
            )

    async def _unseen(self, scope: Scope, name: str) -> Seen:
        """The model sees no pictures: the agent hears one was shared; the member is told
        once (of several pictures at once, only one finds the flag unset)."""
        async with self.sessions() as session, session.begin():
            told = await session.execute(
                update(User)
                .where(
                    User.id
                    == select(Agent.user_id).where(Agent.id == scope.agent_id).scalar_subquery(),
                    ~User.settings.has_key(TOLD),
                )
                .values(settings=User.settings.op("||")({TOLD: True}))
                .returning(User.id)
            )
            first = told.first() is not None
        return Seen(UNSEEN_NOTE.format(name=name), NO_PICTURES.format(name=name) if first else None)
