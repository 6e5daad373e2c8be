"""Progress of long operator commands (import, reembed) on stderr.

On a terminal: one line redrawn in place, with a bar, counts and a percentage. Elsewhere
(logs, CI, pipes): a plain line now and then (every 10%), never control characters.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, every: float = 0.1) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self._shown = -1.0
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        share = done / total if total else 1.0
        if self.tty:
            now = time.monotonic()
            if done < total and now - self._last_draw < 0.1:
                return  # redraw at most ten times a second
            self._last_draw = now
            filled = int(share * WIDTH)
            bar = "█" * filled + "·" * (WIDTH - filled)
            end = "\n" if done >= total else ""
            self.stream.write(f"\r{self.label} {bar} {done:,}/{total:,} ({share:.0%}){end}")
        elif share >= self._shown + self.every or (done >= total and self._shown < 1.0):
            self._shown = share
            self.stream.write(f"{self.label}: {done:,} of {total:,} ({share:.0%})\n")
        self.stream.flush()
