"""Where messages sent outside a live handler go: routed by the tenant's platform.

`Router` is the engine's `Platforms` port. `open_app` builds one and hands it to the engine
(its outbox and the scheduler's passes use it); each platform the process serves then
adds its `adapters.posting.Outlets` under the platform's name in tenant keys (`discord`,
`slack`): `companion run` as it enters the platforms, `companion tick` over their REST
APIs (`bot.operator.rest_platforms`). Openers go as a DM (`direct`); retried replies back
where the member wrote, else as a DM (`reply_route`). A tenant of no platform added here
(the terminal's, or one another process serves) raises `NoPlatform`: its messages wait in
the outbox.
"""

from __future__ import annotations

from typing import Any

from adapters.posting import Outlets, direct, where_written
from core.errors import NoPlatform
from core.ports import Send
from core.tenant_key import TenantKey


class Router:
    """`core.ports.Platforms` over the platforms added, chosen by the tenant key's platform."""

    def __init__(self) -> None:
        self.outlets: dict[str, Outlets] = {}

    def add(self, platform: str, outlets: Outlets) -> None:
        self.outlets[platform] = outlets

    def remove(self, platform: str) -> None:
        self.outlets.pop(platform, None)

    def served(self) -> frozenset[str]:
        return frozenset(self.outlets)

    def reply_route(self, tenant: str, user: str, meta: dict[str, Any]) -> Send:
        return where_written(self._of(tenant), tenant, user, meta)

    def direct(self, tenant: str, user: str) -> Send:
        return direct(self._of(tenant), tenant, user)

    def _of(self, tenant: str) -> Outlets:
        outlets = self.outlets.get(TenantKey.parse(tenant).platform)
        if outlets is None:
            raise NoPlatform(tenant)
        return outlets
