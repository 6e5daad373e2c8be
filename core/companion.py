"""The community's own companion: the name, persona and instructions its admins give it.

    CompanionProfile             what a tenant's admins set (empty strings: the defaults)
    profile_of(settings)         a tenant's profile from `Tenant.settings["companion"]`
    checked(name, persona, instructions, persona_limit)   within the limits, or `BadSetting`

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
    return text.replace("\r\n", "\n").strip()


def _within(what: str, text: str, limit: int) -> str:
    if len(text) > limit:
        raise BadSetting(f"the {what} would have {len(text)} characters, over its limit of {limit}")
    return text


def checked(name: str, persona: str, instructions: str, persona_limit: int) -> CompanionProfile:
    """The profile as typed, tidied and held to its limits; `BadSetting` says which is over."""
    name = re.sub(r"\s+", " ", name).strip()
    if any(c in name for c in "<>@#`*_~|"):
        raise BadSetting("the name may not contain < > @ # ` * _ ~ |")
    return CompanionProfile(
        _within("name", name, NAME_LIMIT),
        _within("persona", _tidy(persona), persona_limit),
        _within("community instructions", _tidy(instructions), INSTRUCTIONS_LIMIT),
    )
