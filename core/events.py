"""Inbound events: the only thing that makes an agent think.

Adapters build an `InboundEvent` (a frozen value, nothing platform-shaped) and hand it to
`Engine.submit`, which stores it before any model call. `trigger_fields` is how each kind
of event enters the agent's FIFO queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from core.errors import EventTooLarge

MAX_EVENT_CHARS = 200_000


class EventKind(StrEnum):
    USER_MESSAGE = "user_message"
    SYSTEM_ALERT = "system_alert"
    USER_ACTION = "user_action"
    SCHEDULED = "scheduled"


class Purpose(StrEnum):
    """What a scheduled event is for (its meta's `purpose`)."""

    OPENER = "opener"  # open a conversation with the member
    UPKEEP = "upkeep"  # tidy memory while the member is idle; it says nothing


def purpose_of(payload: dict[str, Any]) -> Purpose | None:
    """The purpose of a stored event (None for an event the bot did not start)."""
    purpose = (payload.get("meta") or {}).get("purpose")
    return next((known for known in Purpose if known == purpose), None)


class EventStatus(StrEnum):
    PENDING = "pending"  # stored, not handled yet (or its turn was cut off by a crash)
    WAITING = "waiting"  # stored, held until released: the files shared with it come first
    DONE = "done"  # the agent handled it
    FAILED = "failed"  # the model or the engine failed; the member got an apology
    LIMITED = "limited"  # over a rate limit or token budget: answered without a model call


# The start of the error of a pending event that waits for a model that is down
# (`core.runtime.handling`); the metrics count such events by it.
DEFERRED = "waiting for the model: "


def clean_text(text: str) -> str:
    """Text Postgres can store: no NUL bytes, no lone surrogates (both become U+FFFD)."""
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_value(value: Any) -> Any:
    """`clean_text` on every string in a JSON value (the meta a platform sends along)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_value(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(str(key)): clean_value(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class InboundEvent:
    kind: EventKind
    text: str
    dedup_key: str | None = None  # the platform's id for it: a redelivery is stored once
    meta: dict[str, Any] = field(default_factory=dict)
    written_at: datetime | None = None  # when the platform says it was written

    def payload(self) -> dict[str, Any]:
        if len(self.text) > MAX_EVENT_CHARS:
            raise EventTooLarge(len(self.text), MAX_EVENT_CHARS)
        return {"text": clean_text(self.text), "meta": clean_value(self.meta)}


_PREFIX = {
    EventKind.SYSTEM_ALERT: "",
    EventKind.USER_ACTION: "[user action] ",
    EventKind.SCHEDULED: "[scheduled interrupt] ",
}


def trigger_fields(kind: str, text: str) -> dict[str, Any]:
    """The stored-message fields for an event's text."""
    if kind == EventKind.USER_MESSAGE:
        return {"role": "user", "content": text, "search_text": text}
    return {"role": "system", "content": _PREFIX[EventKind(kind)] + text}
