"""A tenant at a glance, for its admins: who the members are, what they cost, its settings.

    roster(tenant)             every member with messages, passages, last active, tokens
    usage(tenant, days)        tokens per day (cached and uncached when the usage table knows)
    settings(tenant)           welcome and opener settings, the tenant's over the defaults
    change_settings(tenant, actor, form)   validated, audited, and every schedule re-planned

Tenant-wide reads run as the connection's own role (no single member's wall applies); every
query filters on the tenant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.config import EngineConfig
from core.directory import lock_tenant
from core.errors import BadSetting
from core.members.audit import record
from core.members.service import parse_quiet_hours
from core.models import Agent, Message, Passage, Tenant, Usage, User
from core.schedule.planning import replan

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
    }


def _stored(settings: TenantSettings) -> dict[str, Any]:
    """The settings under the names `Tenant.settings` keeps them by."""
    return {
        "welcome": settings.welcome,
        "openers": settings.openers,
        "quiet_hours": settings.quiet_hours,
        "opener_inactivity_hours": settings.inactivity_hours,
        "opener_max_unanswered": settings.max_unanswered,
        "upkeep": settings.upkeep,
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
