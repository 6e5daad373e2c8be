"""What every platform adapter shares: the services it calls and the words it answers with.

Adapters translate; the decisions live in `core`. `Services` is handed to each adapter by the
composition root (`bot/run.py`). Admin checks combine the platform's own role (checked by the
adapter) with `COMPANION_ADMIN_IDS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.companion import INSTRUCTIONS_LIMIT, CompanionProfile, Reach
from core.errors import BadSetting
from core.members.community import Community, checked_welcome_text
from core.members.service import Members, MemoryView
from core.tenants.access import Access

if TYPE_CHECKING:  # the engine's modules (the turn, the tools' schemas) are not the inspector's
    from core.runtime.engine import Engine


@dataclass(frozen=True)
class Services:
    engine: Engine
    members: Members
    admin_ids: frozenset[str] = field(default_factory=frozenset)
    welcome_default: bool = True
    access: Access | None = None  # sign-in links to the memory inspector
    community: Community | None = None  # the community's own limits

    async def web_link(self, tenant: str, user: str, admin: bool = False) -> str:
        """What to answer `/memory web` (or the admin variant) with: a private link."""
        if self.access is None:
            return NO_INSPECTOR
        url = await self.access.link(tenant, None if admin else user, user)
        minutes = int(self.access.link_ttl.total_seconds() // 60)
        what = "your community's members, usage and settings" if admin else "your memory"
        return WEB_LINK.format(url=url, minutes=minutes, what=what)

    async def welcome_enabled(self, tenant: str) -> bool:
        settings = await self.members.tenant_settings(tenant)
        return bool(settings.get("welcome", self.welcome_default))

    async def welcome_event(self, tenant: str, name: str) -> str | None:
        """What the new member's companion is asked to write, None when welcomes are off."""
        settings = await self.members.tenant_settings(tenant)
        if not settings.get("welcome", self.welcome_default):
            return None
        return welcome_text(name, str(settings.get("welcome_text") or ""))


WELCOME_EVENT = (
    "{name} just joined the community. Write them a short, warm welcome in your own voice, "
    "say what you can do (remember what they tell you, talk any time by direct message), "
    "and invite them to say hello."
)
WELCOME_ASKED = "The community's admins ask every welcome to say this, in your words: {text}"


def welcome_text(name: str, asked: str = "") -> str:
    """The event a new member's companion writes their welcome from."""
    event = WELCOME_EVENT.format(name=name)
    return f"{event}\n{WELCOME_ASKED.format(text=asked)}" if asked else event


NOT_ADMIN = "Only community admins can do that."
NO_INSPECTOR = "The memory inspector is not running here; ask the operator."
WEB_LINK = (
    "Here is your private link to {what} in a browser: <{url}>\n"
    "It works once, for {minutes} minutes. Don't share it: it opens {what}."
)
SORRY = "Sorry, something went wrong on my side; please try again in a moment."
FORGET_DONE = "Done: everything I remembered about you is erased."
FORGET_ASK = "This erases everything I remember about you, for good. Are you sure?"
NOTHING_YET = "I don't have any memory of you yet. Say hello first!"
HELP = (
    "memory: show what I remember about you | export: send you all of it as a file | "
    "forget: erase it | openers on/off: whether I may start conversations | "
    "quiet 22:00-09:00: hours I stay silent | timezone Europe/Berlin: your time zone | "
    "web: a private link to see and correct your memory in a browser"
)


COMPANION_SAVED = {
    "name": "Saved: your community's companion is now called {value}.",
    "instructions": "Saved: every member's companion follows these instructions from its "
    "next answer ({length} of {limit} characters).",
    "persona": "Saved: new members' companions start from this persona. Existing members "
    "keep theirs; to replace them too, use the admin pages (admin web).",
}
CLEAR = "-"  # as the whole text of a setting: back to the default


async def change_companion(
    members: Members, tenant: str, actor: str, changes: dict[str, str]
) -> tuple[CompanionProfile | None, str]:
    """An admin's change to the community's companion, from a slash command: the profile
    saved (None: refused) and what to answer."""
    wanted = {k: "" if v.strip() == CLEAR else v for k, v in changes.items()}
    try:
        profile, _ = await members.profiles.change(
            tenant,
            actor,
            name=wanted.get("name"),
            persona=wanted.get("persona"),
            instructions=wanted.get("instructions"),
        )
    except BadSetting as refused:
        return None, f"Not saved: {refused}. Nothing was changed."
    said = []
    for part, value in profile.stored.items():
        if part not in wanted:
            continue
        if not value:
            said.append(f"Saved: the {part} is back to the default.")
            continue
        limit = INSTRUCTIONS_LIMIT
        said.append(COMPANION_SAVED[part].format(value=value, length=len(value), limit=limit))
    return profile, "\n".join(said)


async def companion_text(members: Members, tenant: str) -> str:
    """The community's companion as its admins see it in a slash command's answer."""
    profile, agents = await members.profiles.get(tenant)
    instructions = profile.instructions or "(none)"
    return (
        f"**Name:** {profile.name or '(from the persona)'}\n"
        f"**Community instructions** ({len(profile.instructions)}/{INSTRUCTIONS_LIMIT}):\n"
        f"{instructions}\n"
        f"**Persona of new members' companions:** {profile.persona or '(the built-in one)'}\n"
        f"_{agents} members already have a companion; their personas are their own._"
    )


CHANNEL_SAID = {
    "answer": "I now answer in {name} (when addressed there).",
    "never": "I will never answer in {name}.",
    "open": "Every message in {name} is now for me: no mention needed.",
    "default": "{name} is back to the default.",
}


def reach_text(reach: Reach) -> str:
    """Where the companion answers, in one paragraph an admin reads in a slash command."""

    def named(ids: tuple[str, ...]) -> str:
        return ", ".join(reach.name_of(c) for c in ids)

    parts = [
        f"Answers in: {named(reach.channels)}." if reach.channels else "Answers wherever addressed."
    ]
    if reach.never:
        parts.append(f"Never in: {named(reach.never)}.")
    if reach.open_channel:
        parts.append(f"Every message is for it in: {reach.name_of(reach.open_channel)}.")
    parts.append("Direct messages: " + ("on." if reach.dms else "off."))
    return " ".join(parts)


async def place_channel(
    members: Members, tenant: str, actor: str, channel: str, name: str, mode: str
) -> str:
    try:
        reach = await members.admission.place(tenant, actor, channel, mode, name)
    except BadSetting as refused:
        return f"Not saved: {refused}."
    return CHANNEL_SAID[mode].format(name=name) + " " + reach_text(reach)


async def block_member(
    members: Members, tenant: str, actor: str, user: str, name: str, blocked: bool
) -> str:
    changed = await members.admission.block(tenant, actor, user, blocked)
    if blocked:
        state = "is now blocked" if changed else "was already blocked"
        return (
            f"{name} {state}: I won't answer them or start conversations with them (they are "
            "told once). Their memory is kept."
        )
    return f"{name} {'is unblocked' if changed else 'was not blocked'}: I answer them again."


LIMIT_NAMES = {  # as admins type them in a slash command
    "messages": "rate_limit",
    "member_tokens": "member_daily_tokens",
    "community_tokens": "tenant_daily_tokens",
    "member_dollars": "member_daily_usd",
    "community_dollars": "tenant_daily_usd",
}
NO_LIMITS = "Limits are set by the operator here; ask them."


def _amount(value: float, dollars: bool) -> str:
    return f"{value:,.2f}" if dollars else f"{value:,.0f}"  # never 1e+06


async def limits_text(community: Community | None, tenant: str) -> str:
    if community is None:
        return NO_LIMITS
    lines = []
    for limit in await community.limits(tenant):
        mine = "none of yours" if limit.value is None else _amount(limit.value, limit.dollars)
        ceiling = "none" if limit.ceiling is None else _amount(limit.ceiling, limit.dollars)
        lines.append(f"{limit.what}: {mine} (the operator's ceiling: {ceiling})")
    return "\n".join(lines)


async def set_limits(
    community: Community | None, tenant: str, actor: str, changes: dict[str, str]
) -> str:
    """An admin's change to the community's limits (by LIMIT_NAMES; `-` for none)."""
    if community is None:
        return NO_LIMITS
    current = await community.limits(tenant)
    form = {limit.key: "" if limit.value is None else str(limit.value) for limit in current}
    for name, value in changes.items():
        form[LIMIT_NAMES[name]] = "" if value.strip() == CLEAR else value
    try:
        await community.change_limits(tenant, actor, form)
    except BadSetting as refused:
        return f"Not saved: {refused}. Nothing was changed."
    return "Saved.\n" + await limits_text(community, tenant)


async def set_welcome_text(members: Members, tenant: str, actor: str, text: str) -> str:
    try:
        wanted = "" if text.strip() == CLEAR else checked_welcome_text(text)
    except BadSetting as refused:
        return f"Not saved: {refused}."
    await members.tenant_settings(tenant, actor=actor, welcome_text=wanted)
    if not wanted:
        return "Saved: welcomes say what the companion chooses."
    return "Saved: every welcome will say this, in the companion's own words."


def memory_text(view: MemoryView | None) -> str:
    """A member's working context and counts, as plain markdown."""
    if view is None:
        return NOTHING_YET
    lines = []
    for label, value, limit in view.blocks:
        lines.append(f"**{label}** ({len(value)}/{limit} characters)\n{value}")
    openers = "off" if view.settings.get("openers") is False else "on"
    quiet = view.settings.get("quiet_hours", "22:00-09:00")
    lines.append(
        f"_{view.messages} messages in recall storage, {view.passages} archival passages. "
        f"Openers {openers}, quiet hours {quiet}, time zone {view.timezone}._"
    )
    return "\n\n".join(lines)


def export_bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, indent=2).encode("utf-8")
