"""What an eval task hands back: a summary, a table, and every item, for JSON and a person."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    task: str
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "summary": self.summary,
            "table": [dict(zip(self.headers, row, strict=True)) for row in self.rows],
            "notes": self.notes,
            "items": self.items,
        }

    def table(self) -> str:
        cells = [self.headers] + [[_cell(c) for c in row] for row in self.rows]
        widths = [max(len(str(row[i])) for row in cells) for i in range(len(self.headers))]
        lines = [
            "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def percent(values: list[float]) -> float:
    """The mean of 0..1 values, as a percentage (0 for none)."""
    return round(100 * statistics.fmean(values), 1) if values else 0.0
