"""When to open a conversation: a pure function of (now, policy, history).

    next_opener(policy, history, jitter) -> Plan(at, why)

An opener is due `inactivity` (plus up to `jitter`) after the member last wrote, never
sooner than `min_gap` after the previous opener, never while `max_unanswered` openers in a
row went unanswered, and never inside the member's quiet hours (in their own time zone, DST
included): a time that falls inside them moves to the end of the quiet hours. Members who
never talked to the bot, or opted out, get no opener. `catch_up` spreads openers that fell
due while nobody was running, instead of sending them all at once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from core.config import OpenerPolicy


@dataclass(frozen=True)
class OpenerHistory:
    last_user_at: datetime | None
    last_opener_at: datetime | None = None
    unanswered: int = 0


@dataclass(frozen=True)
class Plan:
    at: datetime | None
    why: str


def in_quiet_hours(moment: datetime, policy: OpenerPolicy) -> bool:
    local = moment.astimezone(ZoneInfo(policy.timezone)).time()
    start, end = policy.quiet_start, policy.quiet_end
    if start == end:
        return False
    if start < end:
        return start <= local < end
    return local >= start or local < end  # the span crosses midnight


def after_quiet_hours(moment: datetime, policy: OpenerPolicy) -> datetime:
    """`moment`, or the end of the quiet hours it falls in (in the member's time zone)."""
    if not in_quiet_hours(moment, policy):
        return moment
    zone = ZoneInfo(policy.timezone)
    local = moment.astimezone(zone)
    end_day = local.date()
    if local.time() >= policy.quiet_end:  # evening part of the span: it ends tomorrow
        end_day += timedelta(days=1)
    end = datetime.combine(end_day, policy.quiet_end, tzinfo=zone)
    # A wall-clock time skipped by a DST change resolves forward (zoneinfo, fold=0).
    return end.astimezone(moment.tzinfo)


def jitter_for(*parts: object) -> float:
    """A stable fraction in [0, 1) from the given values (the same agent gets the same)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def next_opener(policy: OpenerPolicy, history: OpenerHistory, jitter: float) -> Plan:
    if not policy.enabled:
        return Plan(None, "openers are off for this member")
    if history.last_user_at is None:
        return Plan(None, "the member has never written")
    if history.unanswered >= policy.max_unanswered:
        return Plan(None, f"{history.unanswered} opener(s) in a row went unanswered")
    at = history.last_user_at + policy.inactivity + policy.jitter * jitter
    why = f"{_days(policy.inactivity)} after their last message"
    if history.last_opener_at is not None and history.last_opener_at + policy.min_gap > at:
        at = history.last_opener_at + policy.min_gap
        why = f"{_days(policy.min_gap)} after the last opener"
    moved = after_quiet_hours(at, policy)
    if moved != at:
        why += f", moved past quiet hours ({policy.quiet_start:%H:%M}-{policy.quiet_end:%H:%M} "
        why += f"{policy.timezone})"
    return Plan(moved, why)


def catch_up(
    due: datetime,
    now: datetime,
    policy: OpenerPolicy,
    spread: timedelta,
    jitter: float,
    late: timedelta = timedelta(minutes=30),
) -> datetime | None:
    """None to send now; else a new time, when the opener is long overdue (after downtime).

    Long-overdue openers are spread over `spread` from now, and out of quiet hours, so a
    restart after a day offline does not send a burst.
    """
    if now - due <= late and not in_quiet_hours(now, policy):
        return None
    return after_quiet_hours(now + spread * jitter + timedelta(seconds=1), policy)


def _days(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 24 else f"{hours:g} hours"


def policy_for(
    defaults: OpenerPolicy,
    tenant: dict[str, object],
    member: dict[str, object],
    timezone: str,
) -> OpenerPolicy:
    """The opener policy of one member: their choices over the tenant's over the defaults."""
    enabled = member.get("openers", tenant.get("openers", defaults.enabled))
    if member.get("blocked"):  # an admin paused the companion for this member
        enabled = False
    quiet = str(member.get("quiet_hours") or tenant.get("quiet_hours") or "")
    start, end = defaults.quiet_start, defaults.quiet_end
    if "-" in quiet:
        first, _, second = quiet.partition("-")
        start, end = time.fromisoformat(first), time.fromisoformat(second)
    hours = tenant.get("opener_inactivity_hours")
    return OpenerPolicy(
        enabled=bool(enabled),
        inactivity=timedelta(hours=float(hours)) if hours else defaults.inactivity,  # type: ignore[arg-type]
        jitter=defaults.jitter,
        min_gap=defaults.min_gap,
        max_unanswered=int(tenant.get("opener_max_unanswered", defaults.max_unanswered)),  # type: ignore[call-overload]
        quiet_start=start,
        quiet_end=end,
        timezone=timezone or defaults.timezone,
    )
