"""An export's file, read and written whole.

read_export(path)         the JSON of an export file (or "-": stdin); BadExport says
                          why it cannot be read
write_whole(path, text)   `path` written whole or not at all
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from core.errors import BadExport


def write_whole(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a regular file goes to a temporary file beside it,
    renamed over it once written, so that a full disk or a kill halfway leaves the previous
    export as it was, never a truncated one (a pipe or a device is written directly)."""
    path = Path(os.path.realpath(path))  # a link stays a link to the new export
    if path.exists() and not path.is_file():
        path.write_text(text, encoding="utf-8")
        return
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def read_export(path: str) -> Any:
    try:
        raw = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        return json.loads(raw)
    except OSError as error:
        raise BadExport(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadExport(f"{path} is not valid JSON: {error}") from None
    except (RecursionError, ValueError):
        raise BadExport(
            f"{path} is not JSON I can read: nested too deeply or numbers too large"
        ) from None
