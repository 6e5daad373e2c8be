"""A community's key, as `tenants.key` holds it: `<platform>:<the platform's id for it>`.

    TenantKey("discord", "123") <-> "discord:123"      a Discord server
    TenantKey("slack", "T0123") <-> "slack:T0123"      a Slack workspace
    TenantKey.parse("local")    -> platform ""         no platform's: the terminal's own

Front ends build keys with it and read them back with `parse`; core knows only that a key
may name a platform, never which platforms there are (the `Platforms` port says which it
reaches).
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = ":"


@dataclass(frozen=True)
class TenantKey:
    platform: str  # "" for a tenant no platform serves (the terminal's)
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
