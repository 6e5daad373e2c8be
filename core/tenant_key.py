"""A community's key, as `tenants.key` holds it: `<platform>:<the platform's id for it>`.

    TenantKey("chat", "42") <-> "chat:42"     community 42 of the platform `chat`
    TenantKey.parse("home") -> platform ""    a key that names no platform (a front end's
                                              own community: no platform delivers to it)

Front ends build keys with it and read them back with `parse`; core knows only that a key
may name a platform, never which platforms there are (the `Platforms` port says which it
reaches).
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = ":"
# The most characters a tenant's key or a user's id may have: Postgres indexes both, and an
# index row holds a few thousand bytes (platforms' ids are a few dozen characters at most).
MAX_ID_CHARS = 255


@dataclass(frozen=True)
class TenantKey:
    platform: str  # "" for a key that names no platform
    id: str

    @classmethod
    def parse(cls, key: str) -> TenantKey:
        platform, separator, rest = key.partition(SEPARATOR)
        return cls(platform, rest) if separator else cls("", key)

    def __str__(self) -> str:
        return f"{self.platform}{SEPARATOR}{self.id}" if self.platform else self.id

    @staticmethod
    def prefix(platform: str) -> str:
        """What every key of `platform` starts with (for a query over its tenants)."""
        return f"{platform}{SEPARATOR}"
