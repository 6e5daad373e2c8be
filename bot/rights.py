"""Whether someone is still an admin of a community: asked of the platform it is on.

`PlatformRights` is the `core.ports.AdminRights` of `companion run`: each platform it serves
adds its check (`add("slack", ...)`, `add("discord", ...)`, from the adapters), and
`Access.viewer` asks it, at most once a minute per admin, whether an admin's inspector
session still has an admin behind it. A tenant of a platform this process does not serve
(`companion web` alone, the terminal's) gets None: nobody here can tell.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from core.tenant_key import TenantKey

Check = Callable[[str, str], Awaitable[bool | None]]  # (tenant, user) -> admin now?


class PlatformRights:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}

    def add(self, platform: str, check: Check) -> None:
        self.checks[platform] = check

    async def is_admin(self, tenant: str, user: str) -> bool | None:
        check = self.checks.get(TenantKey.parse(tenant).platform)
        return None if check is None else await check(tenant, user)
