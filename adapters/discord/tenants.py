"""Discord's tenants: a server is a community, its key `discord:<guild id>` (a `TenantKey`)."""

from __future__ import annotations

from core.tenant_key import TenantKey

PLATFORM = "discord"  # as tenant keys name it
EVERY = TenantKey.prefix(PLATFORM)  # what every Discord tenant's key starts with


def tenant_key(guild_id: int) -> str:
    """The tenant of a Discord server."""
    return str(TenantKey(PLATFORM, str(guild_id)))


def guild_of(tenant: str) -> int | None:
    """The server of a Discord tenant (None for a key that names none)."""
    key = TenantKey.parse(tenant)
    return int(key.id) if key.platform == PLATFORM and key.id.isdigit() else None
