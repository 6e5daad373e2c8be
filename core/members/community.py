"""A tenant at a glance, for its admins: who the members are, what they cost, its settings.

    roster(tenant)             every member with messages, passages, last active, tokens
    usage(tenant, days)        tokens per day (cached and uncached when the usage table knows)
    settings(tenant)           welcome and opener settings, the tenant's over the defaults
    change_settings(tenant, actor, form)   validated, audited, and every schedule re-planned
    limits(tenant)             the community's own budgets, and the operator's ceilings
    change_limits(tenant, actor, form)     within the ceilings, audited

Tenant-wide reads run as the connection's own role (no single member's wall applies); every
query filters on the tenant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import lock_tenant
from core.errors import BadSetting
from core.events import clean_text
from core.members.service import parse_quiet_hours
from core.models import Agent, Message, Passage, Tenant, Usage, User
from core.schedule.planning import replan
from core.tenants.audit import record

ROSTER_LIMIT = 500


@dataclass(frozen=True)
class MemberRow:
    user: str
    display_name: str | None
    messages: int
    passages: int
    last_active: datetime | None
    tokens_today: int
    tokens_month: int
    blocked: bool = False  # by the community's admins


@dataclass(frozen=True)
class UsageDay:
    day: date
    tokens: int
    cached: int | None  # cached prompt tokens, when the usage table records them


@dataclass(frozen=True)
class TenantSettings:
    welcome: bool
    openers: bool  # the default for members who did not choose
    quiet_hours: str  # the default, e.g. 22:00-09:00, in each member's time zone
    inactivity_hours: float  # an opener comes this long after a member's last message
    max_unanswered: int  # openers in a row without an answer before they stop
    upkeep: bool  # idle agents may tidy their memory
    welcome_text: str = ""  # what the admins want every welcome to say


WELCOME_TEXT_LIMIT = 1000


@dataclass(frozen=True)
class Limit:
    key: str  # as `EngineConfig` and `Tenant.settings["limits"]` name it
    what: str  # as an admin reads it
    value: float | None  # the community's own, None: none
    ceiling: float | None  # the operator's, None: none
    dollars: bool


LIMIT_WORDS = {
    "rate_limit": "messages one member may send per {window}",
    "member_daily_tokens": "model tokens one member may use per UTC day",
    "tenant_daily_tokens": "model tokens the community may use per UTC day",
    "member_daily_usd": "dollars one member may spend per UTC day",
    "tenant_daily_usd": "dollars the community may spend per UTC day",
}


def _flag(form: Mapping[str, str], name: str) -> bool:
    value = form.get(name, "").strip().lower()
    if value not in ("on", "off"):
        raise BadSetting(f"{name.replace('_', ' ')} must be on or off")
    return value == "on"


def _number(form: Mapping[str, str], name: str, what: str, low: float, high: float) -> float:
    raw = form.get(name, "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise BadSetting(f"{what} must be a number, got {raw[:20]!r}") from None
    if not low <= value <= high:
        raise BadSetting(f"{what} must be from {low:g} to {high:g}, got {value:g}")
    return value


def parse_tenant_settings(form: Mapping[str, str]) -> dict[str, Any]:
    """The settings a tenant's admin may change, from a form's strings; `BadSetting` if off."""
    start, end = parse_quiet_hours(form.get("quiet_hours", ""))
    return {
        "welcome": _flag(form, "welcome"),
        "openers": _flag(form, "openers"),
        "quiet_hours": f"{start:%H:%M}-{end:%H:%M}",
        "opener_inactivity_hours": _number(
            form, "inactivity_hours", "hours before an opener", 1, 24 * 90
        ),
        "opener_max_unanswered": int(
            _number(form, "max_unanswered", "unanswered openers in a row", 1, 10)
        ),
        "upkeep": _flag(form, "upkeep"),
        "welcome_text": checked_welcome_text(form.get("welcome_text", "")),
    }


def checked_welcome_text(text: str) -> str:
    tidy = clean_text(text).replace("\r\n", "\n").strip()
    if len(tidy) > WELCOME_TEXT_LIMIT:
        raise BadSetting(
            f"the welcome text would have {len(tidy)} characters, over its limit of "
            f"{WELCOME_TEXT_LIMIT}"
        )
    return tidy


def _limit(raw: str, limit: Limit) -> float | None:
    """One budget from a form: empty for none, else a number within the operator's ceiling."""
    raw = raw.strip().replace(",", "")
    if not raw:
        return None
    try:
        value = float(raw) if limit.dollars else int(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):  # nan or inf: no JSON Postgres stores, no budget
        raise BadSetting(f"{limit.what} must be a number, got {raw[:20]!r}")
    if value <= 0:
        raise BadSetting(f"{limit.what} must be more than 0 (empty: no limit of your own)")
    if limit.ceiling is not None and value > limit.ceiling:
        most = f"{limit.ceiling:.2f}" if limit.dollars else f"{limit.ceiling:,.0f}"
        raise BadSetting(f"{limit.what} can be at most {most}, the operator's ceiling")
    return value


def _stored(settings: TenantSettings) -> dict[str, Any]:
    """The settings under the names `Tenant.settings` keeps them by."""
    return {
        "welcome": settings.welcome,
        "openers": settings.openers,
        "quiet_hours": settings.quiet_hours,
        "opener_inactivity_hours": settings.inactivity_hours,
        "opener_max_unanswered": settings.max_unanswered,
        "upkeep": settings.upkeep,
        "welcome_text": settings.welcome_text,
    }


class Community:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        config: EngineConfig,
        clock: Callable[[], datetime],
        welcome_default: bool = True,
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.clock = clock
        self.welcome_default = welcome_default

    async def roster(self, tenant: str) -> list[MemberRow]:
        """The tenant's members, most recently active first (at most ROSTER_LIMIT)."""
        today = self.clock().date()

        def tokens_since(first: date) -> Any:
            return (
                select(func.coalesce(func.sum(Usage.tokens), 0))
                .where(Usage.agent_id == Agent.id, Usage.day >= first, Usage.day <= today)
                .scalar_subquery()
            )

        def count(model: type[Message] | type[Passage]) -> Any:
            return select(func.count()).where(model.agent_id == Agent.id).scalar_subquery()

        query = (
            select(
                User.external_id,
                User.display_name,
                count(Message),
                count(Passage),
                Agent.last_active_at,
                tokens_since(today),
                tokens_since(today.replace(day=1)),
                func.coalesce(User.settings["blocked"].as_boolean(), False),
            )
            .join(Agent, Agent.user_id == User.id)
            .join(Tenant, Tenant.id == User.tenant_id)
            .where(Tenant.key == tenant)
            .order_by(Agent.last_active_at.desc().nulls_last(), User.external_id)
            .limit(ROSTER_LIMIT)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [MemberRow(*row) for row in rows]

    async def usage(self, tenant: str, days: int = 30) -> list[UsageDay]:
        """Tokens per UTC day over the last `days` days, today included, zero-filled."""
        today = self.clock().date()
        first = today - timedelta(days=days - 1)
        cached_column = getattr(Usage, "cached_tokens", None)  # recorded by newer schemas
        columns: list[Any] = [Usage.day, func.sum(Usage.tokens)]
        if cached_column is not None:
            columns.append(func.sum(cached_column))
        query = (
            select(*columns)
            .join(Tenant, Tenant.id == Usage.tenant_id)
            .where(Tenant.key == tenant, Usage.day >= first, Usage.day <= today)
            .group_by(Usage.day)
        )
        async with self.sessions() as session:
            found = {row[0]: row[1:] for row in (await session.execute(query)).all()}
        result = []
        for offset in range(days):
            day = first + timedelta(days=offset)
            tokens, *cached = found.get(day, (0, 0))
            known = int(cached[0] or 0) if cached_column is not None and cached else None
            result.append(UsageDay(day, int(tokens or 0), known))
        return result

    async def settings(self, tenant: str) -> TenantSettings:
        async with self.sessions() as session:
            stored = await session.scalar(select(Tenant.settings).where(Tenant.key == tenant))
        return self._effective(stored or {})

    def _effective(self, stored: dict[str, Any]) -> TenantSettings:
        defaults = self.config.schedule.openers
        quiet = stored.get("quiet_hours") or (
            f"{defaults.quiet_start:%H:%M}-{defaults.quiet_end:%H:%M}"
        )
        hours = stored.get("opener_inactivity_hours")
        return TenantSettings(
            welcome=bool(stored.get("welcome", self.welcome_default)),
            openers=bool(stored.get("openers", defaults.enabled)),
            quiet_hours=str(quiet),
            inactivity_hours=float(hours or defaults.inactivity.total_seconds() / 3600),
            max_unanswered=int(stored.get("opener_max_unanswered", defaults.max_unanswered)),
            upkeep=bool(stored.get("upkeep", self.config.schedule.upkeep)),
            welcome_text=str(stored.get("welcome_text") or ""),
        )

    async def change_settings(
        self, tenant: str, actor: str, form: Mapping[str, str]
    ) -> TenantSettings:
        """Validate and save, audit what changed, and re-plan every member's next opener."""
        wanted = parse_tenant_settings(form)
        async with self.sessions() as session, session.begin():
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            before = _stored(self._effective(row.settings if row else {}))
            changes = {key: value for key, value in wanted.items() if before[key] != value}
            await record(session, tenant, actor, "settings", None, changes, self.clock())
            row = await lock_tenant(session, tenant)
            assert row is not None  # the audit entry made sure of it
            row.settings = {**(row.settings or {}), **changes}
            await session.flush()
            agents = list(await session.scalars(select(Agent).where(Agent.tenant_id == row.id)))
            for agent in agents:
                await replan(session, agent, self.config.schedule)
            return self._effective(row.settings)

    async def limits(self, tenant: str) -> list[Limit]:
        async with self.sessions() as session:
            stored = await session.scalar(select(Tenant.settings).where(Tenant.key == tenant))
        theirs = (stored or {}).get("limits") or {}
        minutes = int(self.config.rate_window.total_seconds() // 60)
        window = {1: "minute", 60: "hour", 1440: "day"}.get(minutes, f"{minutes} minutes")
        return [
            Limit(
                key,
                words.format(window=window),
                theirs.get(key),
                getattr(self.config, key),
                key.endswith("_usd"),
            )
            for key, words in LIMIT_WORDS.items()
        ]

    async def change_limits(self, tenant: str, actor: str, form: Mapping[str, str]) -> None:
        """The community's own budgets, each within the operator's ceiling; audited."""
        wanted = {}
        for limit in await self.limits(tenant):
            wanted[limit.key] = _limit(form.get(limit.key, ""), limit)
            if limit.dollars and wanted[limit.key] is not None and self.config.price is None:
                raise BadSetting(
                    "a budget in dollars needs a price for the model (ask the operator)"
                )
        async with self.sessions() as session, session.begin():
            await record(session, tenant, actor, "limits", None, wanted, self.clock())
            row = await session.scalar(select(Tenant).where(Tenant.key == tenant))
            assert row is not None  # the audit entry made sure of it
            row.settings = {**(row.settings or {}), "limits": wanted}
