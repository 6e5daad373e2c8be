"""Deployment settings, read from the environment once, in `main()`.

Nothing here is built at import time; `Settings.from_env(os.environ)` is called by the CLI.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.config import FALLBACK_WINDOW, EngineConfig, window_for
from core.errors import ConfigError


def _int(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def _schema(raw: str) -> str | None:
    raw = raw.strip()
    if raw and not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", raw):
        raise ConfigError(f"COMPANION_DB_SCHEMA must be a plain lower-case name, got {raw!r}")
    return raw or None


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "companion"


@dataclass(frozen=True)
class Settings:
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    model: str | None = None
    context_window: int | None = None
    embedding_model: str | None = None
    embedding_dim: int = 1536
    database_url: str | None = None
    db_schema: str | None = None
    data_dir: Path = Path("data")
    model_timeout: float = 60.0
    model_retries: int = 3

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        data_dir = env.get("COMPANION_DATA_DIR", "").strip()
        return cls(
            openai_base_url=env.get("OPENAI_BASE_URL", "").strip() or None,
            openai_api_key=env.get("OPENAI_API_KEY", "").strip() or None,
            model=env.get("COMPANION_MODEL", "").strip() or None,
            context_window=_int(env, "COMPANION_CONTEXT_WINDOW", None),
            embedding_model=env.get("COMPANION_EMBEDDING_MODEL", "").strip() or None,
            embedding_dim=_int(env, "COMPANION_EMBEDDING_DIM", 1536) or 1536,
            database_url=env.get("DATABASE_URL", "").strip() or None,
            db_schema=_schema(env.get("COMPANION_DB_SCHEMA", "")),
            data_dir=Path(data_dir).expanduser() if data_dir else _default_data_dir(),
            model_timeout=float(_int(env, "COMPANION_MODEL_TIMEOUT", 60) or 60),
            model_retries=_int(env, "COMPANION_MODEL_RETRIES", 3) or 3,
        )

    def require_model(self) -> None:
        """One line naming every missing model setting, or nothing."""
        missing = [] if self.model else ["COMPANION_MODEL"]
        if not self.openai_api_key and not self.openai_base_url:
            missing.append("OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)")
        if missing:
            raise ConfigError(
                "missing model settings: " + ", ".join(missing) + " (see README: Configuration)"
            )

    @property
    def window(self) -> int:
        if self.context_window:
            return self.context_window
        return (window_for(self.model) if self.model else None) or FALLBACK_WINDOW

    def engine_config(self) -> EngineConfig:
        window = self.window
        return EngineConfig(context_window=window, reply_reserve=min(1024, window // 8))
