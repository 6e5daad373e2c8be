"""`companion usage [--tenant T] [--days N]`: what the model cost, per tenant, member and day.

Tokens as providers bill them (input read fresh, input served from the prompt cache,
output) and an estimated cost at the chat model's price (`core.prices`: the defaults, or
the operator's `COMPANION_PRICES`). Days are UTC, as the daily budgets count them; every
model call is in, the summary calls included.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import groupby

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.settings import Settings
from core.errors import ConfigError
from core.members.spending import MemberDay, member_days
from core.prices import Price, Spent

HEADERS = ("day", "tenant", "member", "calls", "input", "cached input", "output", "est. cost")


def _cost(spent: Spent, price: Price | None) -> str:
    return f"${spent.cost(price):,.4f}" if price else "?"


def _row(
    day: str, tenant: str, member: str, calls: int, spent: Spent, price: Price | None
) -> list[str]:
    amounts = (spent.uncached, spent.cached, spent.completion)
    return [day, tenant, member, f"{calls:,}", *(f"{n:,}" for n in amounts), _cost(spent, price)]


def usage_rows(days: Sequence[MemberDay], price: Price | None) -> list[list[str]]:
    """One row per member and day (they come sorted), then each tenant's total for the day."""
    rows: list[list[str]] = []
    for (day, tenant), group in groupby(days, key=lambda d: (d.day, d.tenant)):
        members = list(group)
        for item in members:
            rows.append(_row(f"{day}", tenant, item.user, item.calls, item.spent, price))
        if len(members) > 1:
            total = Spent(*(sum(n) for n in zip(*(_parts(m.spent) for m in members), strict=True)))
            calls = sum(m.calls for m in members)
            rows.append(_row(f"{day}", tenant, "(all)", calls, total, price))
    return rows


def _parts(spent: Spent) -> tuple[int, int, int]:
    return spent.tokens, spent.cached, spent.completion


def render_table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(HEADERS), *(line(r) for r in rows)]


def price_note(model: str | None, price: Price | None) -> str:
    if model is None:
        return "cost: unknown (set COMPANION_MODEL to price its tokens)"
    if price is None:
        return (
            f"cost: unknown, no price for {model}; set COMPANION_PRICES={model}="
            "input/cached/output (dollars per million tokens)"
        )
    return (
        f"cost: estimated at {model}'s price in dollars per million tokens: input "
        f"{price.input:g}, cached input {price.cached_input:g}, output {price.output:g}"
    )


async def usage_report(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    tenant: str | None,
    days: int,
    now: datetime,
) -> list[str]:
    """The report's lines; only the database is needed (not the engine: a quick command)."""
    if days < 1:
        raise ConfigError(f"--days must be 1 or more, got {days}")
    try:
        since = (now - timedelta(days=days - 1)).date()
    except OverflowError:  # before the year 1, or past what a timedelta holds
        raise ConfigError(f"--days reaches back before the year 1: {days}") from None
    async with sessions() as session:
        found = await member_days(session, since, tenant)
    where = f" in {tenant}" if tenant else ""
    if not found:
        return [f"no model usage recorded{where} since {since} (UTC)"]
    price = settings.price
    title = f"model usage{where} per member and day (UTC) since {since}; tokens:"
    return [title, *render_table(usage_rows(found, price)), price_note(settings.model, price)]
