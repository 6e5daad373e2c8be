"""Deployment settings, read from the environment once, in `main()`.

Nothing here is built at import time; `Settings.from_env(os.environ)` is called by the CLI.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from bot.embedders import IN_PROCESS, embedding_dim, embedding_model
from core.config import DEFAULT_WINDOW, FALLBACK_WINDOW, EngineConfig, window_for
from core.errors import ConfigError
from core.local_embedder import LOCAL_DIMENSION
from core.prices import Price, parse_prices, price_for


def _int(
    env: Mapping[str, str], name: str, default: int | None, minimum: int = 1, most: int = 2**63
) -> int | None:
    if not (raw := env.get(name, "").strip()):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not minimum <= value <= most:  # past `most`, what it sets overflows (or is refused)
        side = f"at least {minimum}" if value < minimum else f"at most {most:,}"
        raise ConfigError(f"{name} must be {side}, got {value}")
    return value


def _number(env: Mapping[str, str], name: str, low: float, high: float, hint: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, {hint}, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be {hint}, got {raw!r}")
    return value


def _text(env: Mapping[str, str], name: str) -> str | None:
    return env.get(name, "").strip() or None


def _dollars(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip().lstrip("$")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"{name} must be an amount in US dollars, e.g. 2.50, got {raw!r}"
        ) from None
    if not value > 0:
        raise ConfigError(f"{name} must be more than 0, got {raw!r}")
    return value


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be on or off, got {raw!r}")


def _vision(raw: str) -> str:
    value = raw.strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise ConfigError(f"COMPANION_VISION must be auto, on or off, got {raw!r}")
    return value


def _rate(raw: str) -> tuple[int, int] | None:
    """'30/hour' -> (30, 3600); 'off' -> None."""
    raw = raw.strip().lower()
    if raw in ("", "off", "none", "0"):
        return None
    count, _, unit = raw.partition("/")
    seconds = {"minute": 60, "hour": 3600, "day": 86400}.get(unit.strip())
    if not count.strip().isdigit() or seconds is None or int(count) <= 0:
        raise ConfigError(
            f"COMPANION_RATE_LIMIT must look like 30/hour, 5/minute or off, got {raw!r}"
        )
    return int(count), seconds


def _slack_api_url(url: str | None) -> str | None:
    return (url.rstrip("/") + "/") if url else None  # the Slack SDK wants the trailing slash


def _schema(raw: str) -> str | None:
    raw = raw.strip()
    if raw and not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", raw):
        raise ConfigError(f"COMPANION_DB_SCHEMA must be a plain lower-case name, got {raw!r}")
    return raw or None


def _url(env: Mapping[str, str], name: str, example: str) -> str | None:
    """An http(s) URL (OPENAI_BASE_URL without it failed every model call as an outage)."""
    if (raw := _text(env, name)) and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", raw):
        raise ConfigError(f"{name} must look like {example}, got {raw!r}")
    return raw.rstrip("/") if raw else None


def _secret(raw: str | None) -> str | None:
    if raw and len(raw) < 32:
        raise ConfigError(
            "COMPANION_SECRET_KEY must have at least 32 characters (e.g. `openssl rand -hex 32`)"
        )
    return raw


@dataclass(frozen=True)
class DiscordShards:
    """COMPANION_DISCORD_SHARDS: `auto` (ids and count None: as many shards as Discord
    recommends, all in this process) or IDS/COUNT, e.g. `0-3/8`: shards 0 to 3 of 8."""

    ids: tuple[int, ...] | None = None
    count: int | None = None

    def __str__(self) -> str:
        if self.ids is None:
            return "auto"
        return ",".join(map(str, self.ids)) + f"/{self.count}"


SHARDS_HINT = "COMPANION_DISCORD_SHARDS must be `auto` or IDS/COUNT such as 0-3/8 or 2/4"


def _shards(raw: str | None) -> DiscordShards | None:
    if not raw:
        return None
    if raw.lower() == "auto":
        return DiscordShards()
    match = re.fullmatch(r"(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)/(\d+)", raw.replace(" ", ""))
    if not match:
        raise ConfigError(f"{SHARDS_HINT}, got {raw!r}")
    count, ids = int(match[2]), set[int]()
    for part in match[1].split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise ConfigError(f"{SHARDS_HINT} (a range goes up, as in 0-3), got {raw!r}")
        if high >= count:  # before the range is built: 0-99999999999/8 would fill memory
            raise ConfigError(f"{SHARDS_HINT} (ids from 0 to COUNT-1), got {raw!r}")
        ids.update(range(low, high + 1))
    return DiscordShards(tuple(sorted(ids)), count)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "companion"


@dataclass(frozen=True)
class Settings:
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    model: str | None = None
    context_window: int | None = None
    # None: the local embedder; "multilingual": the local multilingual one; "none": full text only
    embedding_model: str | None = None
    embedding_dim: int = LOCAL_DIMENSION
    database_url: str | None = None
    db_schema: str | None = None
    data_dir: Path = Path("data")
    models: Path | None = None  # COMPANION_MODELS_DIR; unset: data_dir / "models"
    model_timeout: float = 60.0
    model_retries: int = 3
    max_output_tokens: int | None = None  # None: min(1024, window / 8)
    model_concurrency: int = 64  # model calls in flight in one process
    outage_minutes: int = 720  # how long messages wait for a model that is down
    temperature: float | None = None  # None: the server's default
    top_p: float | None = None
    discord_token: str | None = None
    discord_api_url: str | None = None
    discord_gateway_url: str | None = None
    discord_home_guild: int | None = None
    discord_shards: DiscordShards | None = None  # None: one gateway connection, unsharded
    slack_bot_token: str | None = None  # one workspace; else SLACK_CLIENT_ID: any workspace
    slack_app_token: str | None = None
    slack_signing_secret: str | None = None
    slack_client_id: str | None = None  # the OAuth install flow (distribution)
    slack_client_secret: str | None = None
    slack_api_url: str | None = None
    http_host: str = "0.0.0.0"
    http_port: int = 3000
    ops_port: int | None = None  # /readyz in full and /metrics, on a listener of their own
    ops_public: bool = False  # also on the public port (a private network only)
    public_url: str | None = None  # where people reach the inspector; else host and port
    secret_key: str | None = None  # signs sign-in links; else a secret kept in the database
    previous_secret_key: str | None = None  # while rotating: opens what the old one sealed
    link_minutes: int = 15  # how long a sign-in link works
    admin_ids: frozenset[str] = frozenset()
    welcome: bool = True
    vision: str = "auto"  # pictures shown to the model: on, off, auto (until it refuses one)
    rate_limit: tuple[int, int] | None = (30, 3600)  # messages, per seconds
    tenant_daily_tokens: int | None = None
    member_daily_tokens: int | None = None
    tenant_daily_usd: float | None = None
    member_daily_usd: float | None = None
    prices: dict[str, Price] = field(default_factory=dict)  # the operator's, over the defaults

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        data_dir = env.get("COMPANION_DATA_DIR", "").strip()
        return cls(
            openai_base_url=_url(env, "OPENAI_BASE_URL", "http://localhost:11434/v1"),
            openai_api_key=env.get("OPENAI_API_KEY", "").strip() or None,
            model=env.get("COMPANION_MODEL", "").strip() or None,
            context_window=_int(env, "COMPANION_CONTEXT_WINDOW", None),
            embedding_model=embedding_model(env),
            embedding_dim=embedding_dim(
                embedding_model(env), _int(env, "COMPANION_EMBEDDING_DIM", None, most=4000)
            ),
            database_url=env.get("DATABASE_URL", "").strip() or None,
            db_schema=_schema(env.get("COMPANION_DB_SCHEMA", "")),
            data_dir=Path(data_dir).expanduser() if data_dir else _default_data_dir(),
            models=Path(models).expanduser()
            if (models := env.get("COMPANION_MODELS_DIR", "").strip())
            else None,
            model_timeout=float(_int(env, "COMPANION_MODEL_TIMEOUT", 60) or 60),
            model_retries=_int(env, "COMPANION_MODEL_RETRIES", 3, minimum=0) or 0,
            max_output_tokens=_int(env, "COMPANION_MAX_OUTPUT_TOKENS", None, minimum=64),
            model_concurrency=_int(env, "COMPANION_MODEL_CONCURRENCY", 64) or 64,
            outage_minutes=_int(env, "COMPANION_OUTAGE_MINUTES", 720, most=525_600) or 720,
            temperature=_number(env, "COMPANION_TEMPERATURE", 0, 2, "from 0 to 2, e.g. 0.7"),
            top_p=_number(env, "COMPANION_TOP_P", 0, 1, "from 0 to 1, e.g. 0.9"),
            discord_token=_text(env, "DISCORD_TOKEN"),
            discord_api_url=_text(env, "DISCORD_API_URL"),
            discord_gateway_url=_text(env, "DISCORD_GATEWAY_URL"),
            discord_home_guild=_int(env, "COMPANION_DISCORD_HOME_GUILD", None),
            discord_shards=_shards(_text(env, "COMPANION_DISCORD_SHARDS")),
            slack_bot_token=_text(env, "SLACK_BOT_TOKEN"),
            slack_app_token=_text(env, "SLACK_APP_TOKEN"),
            slack_signing_secret=_text(env, "SLACK_SIGNING_SECRET"),
            slack_client_id=_text(env, "SLACK_CLIENT_ID"),
            slack_client_secret=_text(env, "SLACK_CLIENT_SECRET"),
            slack_api_url=_slack_api_url(_text(env, "SLACK_API_URL")),
            http_host=_text(env, "COMPANION_HTTP_HOST") or "0.0.0.0",
            http_port=_int(env, "COMPANION_HTTP_PORT", 3000, most=65_535) or 3000,
            ops_port=_int(env, "COMPANION_OPS_PORT", None, most=65_535),
            ops_public=_flag(env, "COMPANION_OPS_PUBLIC", False),
            public_url=_url(env, "COMPANION_PUBLIC_URL", "https://companion.example.org"),
            secret_key=_secret(_text(env, "COMPANION_SECRET_KEY")),
            previous_secret_key=_text(env, "COMPANION_PREVIOUS_SECRET_KEY"),
            link_minutes=_int(env, "COMPANION_LINK_MINUTES", 15, most=525_600) or 15,
            admin_ids=frozenset(
                part.strip()
                for part in env.get("COMPANION_ADMIN_IDS", "").split(",")
                if part.strip()
            ),
            welcome=_flag(env, "COMPANION_WELCOME", True),
            vision=_vision(env.get("COMPANION_VISION", "auto")),
            rate_limit=_rate(env.get("COMPANION_RATE_LIMIT", "30/hour")),
            tenant_daily_tokens=_int(env, "COMPANION_TENANT_DAILY_TOKENS", None),
            member_daily_tokens=_int(env, "COMPANION_MEMBER_DAILY_TOKENS", None),
            tenant_daily_usd=_dollars(env, "COMPANION_TENANT_DAILY_USD"),
            member_daily_usd=_dollars(env, "COMPANION_MEMBER_DAILY_USD"),
            prices=parse_prices(env.get("COMPANION_PRICES", "")),
        )

    @property
    def models_dir(self) -> Path:
        """Where the built-in embedder keeps its int8 model once made (core/local_embedder.py):
        an image makes it at build time (deploy/Dockerfile), as making it takes 350 MB more."""
        return self.models or self.data_dir / "models"

    @property
    def embeds_in_process(self) -> bool:
        """The embedding model runs in this process: the built-in or the multilingual one."""
        return self.embedding_model in IN_PROCESS

    @property
    def embedder_name(self) -> str:
        """The embedding model as a person reads it (`embedder_said`: in a sentence)."""
        return IN_PROCESS.get(self.embedding_model, ("", str(self.embedding_model)))[1]

    @property
    def embedder_said(self) -> str:
        return IN_PROCESS.get(self.embedding_model, ("the embedding model",))[0]

    def require_model(self) -> None:
        """One line naming every missing model setting, or nothing."""
        missing = [] if self.model else ["COMPANION_MODEL"]
        if not self.openai_api_key and not self.openai_base_url:
            missing.append("OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)")
        if missing:
            raise ConfigError(
                "missing model settings: " + ", ".join(missing) + " (see README: Configuration)"
            )
        if (self.tenant_daily_usd or self.member_daily_usd) and self.price is None:
            raise ConfigError(
                f"a budget in dollars needs the price of {self.model}: set COMPANION_PRICES="
                f"{self.model}=input/cached/output (dollars per million tokens)"
            )

    @property
    def price(self) -> Price | None:
        """What the chat model's tokens cost, if the price table knows it."""
        return price_for(self.model, self.prices) if self.model else None

    @property
    def slack_oauth(self) -> bool:
        """Slack in any workspace that installs the app (OAuth), each with its own token."""
        return bool(self.slack_client_id and not self.slack_bot_token)

    @property
    def slack(self) -> bool:
        return bool(self.slack_bot_token or self.slack_oauth)

    @property
    def slack_over_http(self) -> bool:
        """Slack's events on the HTTP server (HTTP mode; always with the install flow)."""
        return self.slack and not self.slack_app_token

    def require_platform(self) -> None:
        """At least one platform, completely configured, or one line saying what to set."""
        if not self.discord_token and not self.slack:
            raise ConfigError(
                "nothing to run: set DISCORD_TOKEN for Discord, and/or SLACK_BOT_TOKEN with "
                "SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode) for Slack "
                "in one workspace, or SLACK_CLIENT_ID, SLACK_CLIENT_SECRET and "
                "SLACK_SIGNING_SECRET for any workspace that installs the app"
            )
        if self.slack_bot_token and self.slack_client_id:
            raise ConfigError(
                "set either SLACK_BOT_TOKEN (one workspace) or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET (any workspace, installed at /slack/install), not both"
            )
        if self.slack_oauth and not (self.slack_client_secret and self.slack_signing_secret):
            raise ConfigError(
                "SLACK_CLIENT_ID needs SLACK_CLIENT_SECRET and SLACK_SIGNING_SECRET (Basic "
                "Information > App Credentials) for the install flow at /slack/install"
            )
        if self.slack_oauth and self.slack_app_token:
            raise ConfigError(
                "SLACK_CLIENT_ID (any workspace) takes events over HTTP at /slack/events: "
                "unset SLACK_APP_TOKEN"
            )
        if self.slack_bot_token and not (self.slack_app_token or self.slack_signing_secret):
            raise ConfigError(
                "SLACK_BOT_TOKEN needs SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET "
                "(HTTP mode on COMPANION_HTTP_HOST:COMPANION_HTTP_PORT, path /slack/events)"
            )

    @property
    def base_url(self) -> str:
        """The inspector's address in links: COMPANION_PUBLIC_URL, else the host and port."""
        if self.public_url:
            return self.public_url
        host = self.http_host
        if host in ("0.0.0.0", "::", ""):  # every interface: this machine answers as localhost
            host = "localhost"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.http_port}"

    @property
    def window(self) -> int:
        if self.context_window:
            return self.context_window
        known = (window_for(self.model) if self.model else None) or FALLBACK_WINDOW
        return min(known, DEFAULT_WINDOW)

    def engine_config(self) -> EngineConfig:
        window = self.window
        limit, seconds = self.rate_limit or (None, 3600)
        reserve = self.max_output_tokens or min(1024, window // 8)
        if reserve > window // 2:
            raise ConfigError(
                f"COMPANION_MAX_OUTPUT_TOKENS ({reserve}) must be at most half the context "
                f"window ({window} tokens): the rest holds the prompt"
            )
        return EngineConfig(
            context_window=window,
            reply_reserve=reserve,
            rate_limit=limit,
            rate_window=timedelta(seconds=seconds),
            tenant_daily_tokens=self.tenant_daily_tokens,
            member_daily_tokens=self.member_daily_tokens,
            tenant_daily_usd=self.tenant_daily_usd,
            member_daily_usd=self.member_daily_usd,
            price=self.price,
            outage_wait=timedelta(minutes=self.outage_minutes),
        )
