"""HTML for the inspector: Jinja2 templates, their filters, the tabs, the usage chart.

Templates live in `bot/web/templates` and autoescape everything. The usage chart is drawn
here as numbers for an inline SVG (no JavaScript), with the same figures in a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from bot.web.auth import member_url
from core.members.community import UsageDay

MEMBER_TABS = (
    ("memory", "Working context", ""),
    ("conversation", "Conversation", "/conversation"),
    ("passages", "Archival memory", "/passages"),
    ("settings", "Openers & settings", "/settings"),
    ("data", "Export & erase", "/data"),
)
ADMIN_TABS = (
    ("members", "Members", "/admin"),
    ("companion", "Your companion", "/admin/companion"),
    ("reach", "Where & who", "/admin/reach"),
    ("usage", "Usage", "/admin/usage"),
    ("settings", "Settings", "/admin/settings"),
    ("audit", "Audit log", "/admin/audit"),
)


@dataclass(frozen=True)
class Tab:
    label: str
    href: str
    current: bool


def member_tabs(base: str, current: str) -> list[Tab]:
    return [Tab(label, base + path, key == current) for key, label, path in MEMBER_TABS]


def admin_tabs(current: str) -> list[Tab]:
    return [Tab(label, path, key == current) for key, label, path in ADMIN_TABS]


def when(moment: datetime | None, zone: str = "UTC") -> str:
    """A moment as a person reads it, in their time zone: 'Sun 1 Mar 2026, 13:00 CET'."""
    if moment is None:
        return "never"
    local = moment.astimezone(ZoneInfo(zone))
    return f"{local:%a} {local.day} {local:%b %Y, %H:%M} {local.tzname()}"


def number(value: int | float) -> str:
    return f"{value:,.0f}"


def plain(value: object) -> str:
    """A value of an audit entry's details as a person reads it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return f"{value:.0f}"
    return str(value)


@dataclass(frozen=True)
class Bar:
    day: str
    x: float
    width: float
    y: float  # top of the whole bar
    height: float
    cached_height: float  # the lower part: cached prompt tokens
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int  # where the plot starts (room for the axis labels)
    base: float  # the y of the zero line
    top: int  # the value at the top of the axis
    bars: list[Bar]
    dates: list[tuple[float, str]]  # (x, label) under some bars
    ticks: list[tuple[float, int]]  # (y, value) of the horizontal grid lines
    has_cached: bool
    total: int


def _nice_ceiling(value: int) -> int:
    """The next of 1, 2, 5 x 10^k at or above `value` (at least 10)."""
    if value <= 10:
        return 10
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def usage_chart(days: list[UsageDay], width: int = 640, height: int = 220) -> Chart:
    left, right, bottom, top_pad = 64, 24, 28, 10
    plot_w, plot_h = width - left - right, height - bottom - top_pad
    top = _nice_ceiling(max((d.tokens for d in days), default=0))
    slot = plot_w / max(len(days), 1)
    bars, dates = [], []
    for i, d in enumerate(days):
        h = plot_h * d.tokens / top
        cached_h = plot_h * (d.cached or 0) / top
        x = left + i * slot + slot * 0.15
        label = f"{d.day:%a %d %b}: {d.tokens:,} tokens"
        if d.cached is not None:
            label += f" ({d.cached:,} cached, {d.tokens - d.cached:,} uncached)"
        bars.append(Bar(d.day.isoformat(), x, slot * 0.7, top_pad + plot_h - h, h, cached_h, label))
        if (len(days) - 1 - i) % 7 == 0:  # every week, counted back from today
            dates.append((x + slot * 0.35, f"{d.day:%d %b}"))
    return Chart(
        width,
        height,
        left,
        top_pad + plot_h,
        top,
        bars,
        dates,
        [(top_pad + plot_h * (1 - share), int(top * share)) for share in (0.5, 1.0)],
        any(d.cached is not None for d in days),
        sum(d.tokens for d in days),
    )


class Templates:
    def __init__(self) -> None:
        self.env = Environment(
            loader=PackageLoader("bot.web", "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = when
        self.env.filters["number"] = number
        self.env.filters["plain"] = plain
        self.env.filters["member_url"] = member_url

    def page(self, template: str, status: int = 200, **context: Any) -> web.Response:
        context.setdefault("notice", None)
        context.setdefault("error", None)
        context.setdefault("viewer", None)
        context.setdefault("tabs", [])
        context.setdefault("subtabs", [])
        for optional in ("hint", "back", "back_label"):
            context.setdefault(optional, None)
        html = self.env.get_template(template).render(**context)
        return web.Response(text=html, status=status, content_type="text/html")
