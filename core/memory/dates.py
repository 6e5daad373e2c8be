"""The days a search query names: "on 8 May, 2023", "in December 2023", "2023-05-08".

    days_named(query)   the days a date in the query names (`Days`), or None

Pure: a query's text in, plain dates out. A date is read only with its year, so "may" the
verb, or "March" the name, is never taken for a month. Understood: ISO dates and months
(2023-05-08, 2023-05), a day, month name and year in either order (8 May 2023, 8th of May,
2023, May 8, 2023, 8. Mai 2023, 8 de mayo de 2023, 8 мая 2023), a month and year (May
2023), 2023年5月8日 and 2023年5月, and a year after "in" or "during" (in 2023). Month names
in English, German, Spanish, French and Russian (any case ending). A named day is widened
by a day either side: what was said late in the evening, or in the member's time zone.

On LoCoMo conversations 0-4 the questions that name a date (109 of 997) found their
evidence more often when the messages of those days ranked once more (`search`): R@5 of all
but adversarial questions 71.2 -> 73.3, on the held-out 5-9 67.3 -> 69.5 (bench/README.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

_MONTH_NAMES = (
    "january|jan|januar|jänner|enero|janvier|январ[а-я]*",
    "february|feb|februar|febrero|février|феврал[а-я]*",
    "march|mar|märz|marzo|mars|март[а-я]*",
    "april|apr|abril|avril|апрел[а-я]*",
    "may|mai|mayo|ма[йяе]",
    "june|jun|juni|junio|juin|июн[а-я]*",
    "july|jul|juli|julio|juillet|июл[а-я]*",
    "august|aug|agosto|août|август[а-я]*",
    "september|sept|sep|septiembre|septembre|сентябр[а-я]*",
    "october|oct|oktober|octubre|octobre|октябр[а-я]*",
    "november|nov|noviembre|novembre|ноябр[а-я]*",
    "december|dec|dezember|diciembre|décembre|декабр[а-я]*",
)
# a month's name as a whole word ("Mark" is no March), an abbreviation with or without its dot
_MONTH = "(" + "|".join(_MONTH_NAMES) + r")(?!\w)\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th|\.|er)?"
_YEAR = r"((?:19|20)\d\d)"
_OF = r"(?:\s+(?:of|de|del))?"  # "8th of May", "8 de mayo de 2023"

# (pattern, what its groups are, in order: y the year, m the month (a name or a number),
# d the day), tried in this order
_PATTERNS = [
    (re.compile(rf"\b{_YEAR}-(\d{{1,2}})-(\d{{1,2}})\b"), "ymd"),
    (re.compile(rf"{_YEAR}年(\d{{1,2}})月(\d{{1,2}})[日号]"), "ymd"),
    (re.compile(rf"{_YEAR}年(\d{{1,2}})月"), "ym"),
    (re.compile(rf"\b{_DAY}{_OF}\s+{_MONTH},?{_OF}\s+{_YEAR}\b", re.IGNORECASE), "dmy"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE), "mdy"),
    (re.compile(rf"\b{_MONTH},?{_OF}\s+{_YEAR}\b", re.IGNORECASE), "my"),
    (re.compile(rf"\b{_YEAR}-(\d{{2}})\b"), "ym"),
    (re.compile(rf"\b(?:in|during|im|en|во?)\s+{_YEAR}\b", re.IGNORECASE), "y"),
]


@dataclass(frozen=True)
class Days:
    """From `first` to `last`, both included, in the member's calendar."""

    first: date
    last: date


def days_named(query: str) -> Days | None:
    """The days of the first date found in `query` (the forms tried in `_PATTERNS`' order);
    None when it names none."""
    for pattern, order in _PATTERNS:
        for found in pattern.finditer(query):
            days = _days(found.groups(), order)
            if days is not None:
                return days
    return None


def _month(value: str) -> int:
    if value.isdigit():
        return int(value)
    lowered = value.lower()
    return next(
        n
        for n, names in enumerate(_MONTH_NAMES, start=1)
        if re.fullmatch("(?:" + names + r")\.?", lowered)
    )


def _days(groups: tuple[str, ...], order: str) -> Days | None:
    parts = dict(zip(order, groups, strict=True))
    try:
        year, month = int(parts["y"]), _month(parts.get("m", "1"))
        if "d" in parts:
            day = date(year, month, int(parts["d"]))
            return Days(day - timedelta(days=1), day + timedelta(days=1))
        if "m" in parts:
            following = date(year + month // 12, month % 12 + 1, 1)
            return Days(date(year, month, 1), following - timedelta(days=1))
        return Days(date(year, 1, 1), date(year, 12, 31))
    except ValueError:  # 31 February, month 13: not a date
        return None
