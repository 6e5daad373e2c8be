"""The community's own companion: the name, persona and instructions its admins give it.

    CompanionProfile             what a tenant's admins set (empty strings: the defaults)
    profile_of(settings)         a tenant's profile from `Tenant.settings["companion"]`
    checked(name, persona, instructions, persona_limit)   within the limits, or `BadSetting`
    Reach, Where, reach_of       where it answers (`Tenant.settings["reach"]`): channels it
                                 answers in, never answers in, the one where every message
                                 is for it, DMs; `Reach.answers(where)` is the rule
    channel_ids(text)            channel ids as an admin types them

The profile is the tenant's, never a member's: only admins write it (core.members), the
model's functions cannot reach it, and every member's agent reads the same text, in the
stable prefix of its prompt (after the instructions, before the working context: the
section `core.memory.prompt.head` writes from the name and instructions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.errors import BadSetting
from core.events import clean_text

NAME_LIMIT = 40
INSTRUCTIONS_LIMIT = 4000
SETTINGS_KEY = "companion"


@dataclass(frozen=True)
class CompanionProfile:
    name: str = ""
    persona: str = ""  # the starting `persona` block of a new member's agent
    instructions: str = ""  # shown to every member's agent, read-only

    @property
    def stored(self) -> dict[str, str]:
        return {"name": self.name, "persona": self.persona, "instructions": self.instructions}


def profile_of(settings: dict[str, Any] | None) -> CompanionProfile:
    stored = (settings or {}).get(SETTINGS_KEY) or {}
    return CompanionProfile(
        str(stored.get("name") or ""),
        str(stored.get("persona") or ""),
        str(stored.get("instructions") or ""),
    )


def _tidy(text: str) -> str:
    return clean_text(text).replace("\r\n", "\n").strip()


def _within(what: str, text: str, limit: int) -> str:
    if len(text) > limit:
        raise BadSetting(f"the {what} would have {len(text)} characters, over its limit of {limit}")
    return text


def checked(name: str, persona: str, instructions: str, persona_limit: int) -> CompanionProfile:
    """The profile as typed, tidied and held to its limits; `BadSetting` says which is over."""
    name = re.sub(r"\s+", " ", clean_text(name)).strip()
    if any(c in name for c in "<>@#`*_~|"):
        raise BadSetting("the name may not contain < > @ # ` * _ ~ |")
    return CompanionProfile(
        _within("name", name, NAME_LIMIT),
        _within("persona", _tidy(persona), persona_limit),
        _within("community instructions", _tidy(instructions), INSTRUCTIONS_LIMIT),
    )


# --- where it speaks ---------------------------------------------------------------------

REACH_KEY = "reach"
MAX_CHANNELS = 50


@dataclass(frozen=True)
class Where:
    """Where a member wrote: a channel (None for a direct message), the channels it is
    inside (a thread's parent), and whether they addressed the companion (a mention, a
    reply to it, a thread it answers in)."""

    channel: str | None
    parents: tuple[str, ...] = ()
    addressed: bool = True


@dataclass(frozen=True)
class Reach:
    """Where a community's companion answers, as its admins set it."""

    channels: tuple[str, ...] = ()  # empty: wherever it is addressed
    never: tuple[str, ...] = ()
    open_channel: str = ""  # every message there is for it, no mention needed
    dms: bool = True
    names: tuple[tuple[str, str], ...] = ()  # (channel id, name) as the platform named them

    def answers(self, where: Where) -> bool:
        if where.channel is None:
            return self.dms
        places = (where.channel, *where.parents)
        if any(place in self.never for place in places):
            return False
        if self.open_channel and self.open_channel in places:
            return True
        return where.addressed and (
            not self.channels or any(place in self.channels for place in places)
        )

    def name_of(self, channel: str) -> str:
        return dict(self.names).get(channel, channel)

    @property
    def stored(self) -> dict[str, Any]:
        return {
            "channels": list(self.channels),
            "never": list(self.never),
            "open": self.open_channel,
            "dms": self.dms,
            "names": dict(self.names),
        }


def reach_of(settings: dict[str, Any] | None) -> Reach:
    stored = (settings or {}).get(REACH_KEY) or {}
    names = stored.get("names") or {}
    return Reach(
        tuple(str(c) for c in stored.get("channels") or ()),
        tuple(str(c) for c in stored.get("never") or ()),
        str(stored.get("open") or ""),
        bool(stored.get("dms", True)),
        tuple(sorted((str(k), str(v)) for k, v in names.items())),
    )


def channel_ids(text: str) -> tuple[str, ...]:
    """Channel ids typed as a list ('C123, 456 <#789>'), in order, once each; `BadSetting`
    for anything that is not one."""
    found: list[str] = []
    for word in re.split(r"[\s,]+", text.strip()):
        if not word:
            continue
        match = re.fullmatch(r"<?#?([A-Za-z0-9]{1,40})(?:\|[^>]*)?>?", word)
        if match is None:
            raise BadSetting(f"{word[:40]!r} is not a channel id (e.g. C0123ABCD or 1234567890)")
        if match.group(1) not in found:
            found.append(match.group(1))
    if len(found) > MAX_CHANNELS:
        raise BadSetting(f"at most {MAX_CHANNELS} channels, got {len(found)}")
    return tuple(found)
