"""Slack in any workspace: Bolt's OAuth install flow, one bot token per workspace.

With SLACK_CLIENT_ID and SLACK_CLIENT_SECRET (and no SLACK_BOT_TOKEN) the Bolt app serves

    /slack/install          the "Add to Slack" page: Slack's authorize URL with a fresh state
    /slack/oauth_redirect   where Slack sends the installer back with a code; Bolt exchanges
                            it (oauth.v2.access at SLACK_API_URL) and saves the installation

and answers each workspace with that workspace's own bot token: Bolt's authorize looks it up
for every request and refreshes a rotating token before it expires.

    Installations   slack_sdk's async SQLAlchemy store on Companion's tables (a migration).
                    Every install and every removal goes through it, so it is where a
                    community arrives (an installation saved) and leaves (its bot deleted,
                    on app_uninstalled or tokens_revoked): core.tenants.tenancy. Tokens are
                    sealed on the way in and opened on the way out (core.sealing, a key
                    from COMPANION_SECRET_KEY); a revoked bot token leaves every row
    States          the OAuth states, in Postgres: any replica finishes an install that
                    another one started
    Workspaces      a workspace's Web API client outside a request (openers, retried
                    replies, files held over a restart), its token refreshed as Bolt does
    distribution    all of it for one app, with the settings of the flow
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.sqlalchemy import (
    AsyncSQLAlchemyInstallationStore,
    SQLAlchemyInstallationStore,
)
from slack_sdk.oauth.state_store.sqlalchemy import AsyncSQLAlchemyOAuthStateStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import desc, distinct, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.slack.events import tenant_key
from core.errors import NotInstalled
from core.sealing import Sealer
from core.tenant_key import TenantKey
from core.tenants.tenancy import Tenancy

log = logging.getLogger(__name__)
INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
STATE_SECONDS = 600  # an install must finish within ten minutes of opening the page
ROTATE_MINUTES = 120  # a rotating token is refreshed when it has less than this left

# The bot scopes the install asks for: the same as deploy/slack-manifest.yaml's (a test
# compares them).
SCOPES = (
    "app_mentions:read",
    "channels:history",
    "chat:write",
    "commands",
    "files:read",
    "files:write",
    "groups:history",
    "im:history",
    "im:write",
    "reactions:write",
    "users:read",
)


TOKENS = ("bot_token", "bot_refresh_token", "user_token", "user_refresh_token")
Entity = TypeVar("Entity", Installation, Bot)


class Installations(AsyncSQLAlchemyInstallationStore):
    def __init__(
        self, client_id: str, engine: AsyncEngine, tenancy: Tenancy, sealer: Sealer
    ) -> None:
        super().__init__(client_id=client_id, engine=engine, logger=log)
        self.tenancy = tenancy
        self.sealer = sealer

    def _sealed(self, entity: Entity) -> Entity:
        sealed = copy.copy(entity)
        for name in TOKENS:
            value = getattr(entity, name, None)
            if value:
                setattr(sealed, name, self.sealer.seal(value))
        return sealed

    def _opened(self, entity: Entity | None) -> Entity | None:
        for name in TOKENS:
            value = getattr(entity, name, None)
            if value:
                setattr(entity, name, self.sealer.open(value))
        return entity

    async def async_save(self, installation: Installation) -> None:
        await super().async_save(self._sealed(installation))
        if installation.team_id:  # installed, reinstalled or its token refreshed
            await self.tenancy.arrived(tenant_key(installation.team_id))

    async def async_save_bot(self, bot: Bot) -> None:
        if not any(self.sealer.is_sealed(getattr(bot, name) or "") for name in TOKENS):
            bot = self._sealed(bot)  # a bot saved alone (async_save seals its own)
        await super().async_save_bot(bot)

    async def async_find_bot(self, **where: Any) -> Bot | None:
        return self._opened(await super().async_find_bot(**where))

    async def async_find_installation(self, **where: Any) -> Installation | None:
        return self._opened(await super().async_find_installation(**where))

    async def reseal(self) -> int:
        """Every stored token sealed with the current key (after a rotation of
        COMPANION_SECRET_KEY, or stored unsealed before): how many values changed."""
        changed = 0
        async with self.engine.begin() as conn:
            for table in (self.installations, self.bots):
                names = [n for n in TOKENS if n in table.c]
                rows = (await conn.execute(select(table.c.id, *table.c[*names]))).mappings()
                for row in list(rows):
                    new = {n: self.sealer.reseal(row[n]) for n in names if row[n]}
                    if new:
                        await conn.execute(table.update().where(table.c.id == row["id"]), new)
                        changed += len(new)
        return changed

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await super().async_delete_bot(enterprise_id=enterprise_id, team_id=team_id)
        c = self.installations.c  # the installations keep a copy of the bot token: gone too
        async with self.engine.begin() as conn:
            await conn.execute(
                self.installations.update()
                .where(
                    c.client_id == self.client_id,
                    c.enterprise_id == enterprise_id,
                    c.team_id == team_id,
                )
                .values(bot_token=None, bot_refresh_token=None, bot_token_expires_at=None)
            )
        if team_id:  # app_uninstalled, or the bot token revoked: nothing can be sent there
            log.info("Slack: workspace %s removed the app; its memory waits", team_id)
            await self.tenancy.departed(tenant_key(team_id))

    async def count(self) -> int:
        """How many workspaces have the app installed (a bot token) now."""
        c = self.bots.c
        query = select(func.count(distinct(c.team_id))).where(
            c.client_id == self.client_id, c.bot_token.is_not(None)
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    async def latest_bot(self, team_id: str) -> Bot | None:
        """The newest bot of a workspace, whatever its enterprise (Enterprise Grid)."""
        c = self.bots.c
        query = (
            self.bots.select()
            .where(c.client_id == self.client_id, c.team_id == team_id, c.bot_token.is_not(None))
            .order_by(desc(c.installed_at))
            .limit(1)
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return self._opened(SQLAlchemyInstallationStore.build_bot_entity(row)) if row else None


class States(AsyncSQLAlchemyOAuthStateStore):
    async def async_issue(self, *args: object, **kwargs: object) -> str:
        """A new state; the expired ones (installs never finished) are cleared first."""
        now = datetime.now(UTC).replace(tzinfo=None)  # the store's column has no zone
        states = self.oauth_states
        async with self.engine.begin() as conn:
            await conn.execute(states.delete().where(states.c.expire_at < now))
        return await super().async_issue(*args, **kwargs)


class Workspaces:
    """Each workspace's Web API client, for messages sent outside a request."""

    def __init__(
        self, installations: Installations, rotator: AsyncTokenRotator, api_url: str
    ) -> None:
        self.installations = installations
        self.rotator = rotator
        self.api_url = api_url

    async def client(self, tenant: str) -> AsyncWebClient:
        """The client of the workspace of `tenant` (`slack:<team id>`); NotInstalled when the
        workspace has no installation (never had, or removed the app)."""
        team = TenantKey.parse(tenant).id
        bot = await self.installations.latest_bot(team)
        installation = bot and await self.installations.async_find_installation(
            enterprise_id=bot.enterprise_id, team_id=team
        )
        if not installation or not installation.bot_token:
            raise NotInstalled(tenant)
        refreshed = await self.rotator.perform_token_rotation(
            installation=installation, minutes_before_expiration=ROTATE_MINUTES
        )
        if refreshed is not None:  # saved whole, as Bolt's authorize saves it
            await self.installations.async_save(refreshed)
            installation = refreshed
        return AsyncWebClient(token=installation.bot_token, base_url=self.api_url)


@dataclass(frozen=True)
class Distribution:
    settings: AsyncOAuthSettings  # for AsyncApp(oauth_settings=...)
    installations: Installations
    workspaces: Workspaces


def distribution(
    client_id: str,
    client_secret: str,
    public_url: str,
    engine: AsyncEngine,
    tenancy: Tenancy,
    sealer: Sealer,
    api_url: str | None = None,
) -> Distribution:
    """The install flow of one Slack app, its stores on `engine`, its redirect on
    `public_url` (COMPANION_PUBLIC_URL: what Slack's OAuth settings list as Redirect URL)."""
    api = api_url or AsyncWebClient.BASE_URL
    installations = Installations(client_id, engine, tenancy, sealer)
    rotator = AsyncTokenRotator(
        client_id=client_id, client_secret=client_secret, client=AsyncWebClient(base_url=api)
    )
    settings = AsyncOAuthSettings(
        client_id=client_id,
        client_secret=client_secret,
        scopes=list(SCOPES),
        redirect_uri=public_url.rstrip("/") + REDIRECT_PATH,
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        installation_store=installations,
        state_store=States(STATE_SECONDS, engine, logger=log),
        state_expiration_seconds=STATE_SECONDS,
        token_rotation_expiration_minutes=ROTATE_MINUTES,
        logger=log,
    )
    # Bolt's own authorize would refresh tokens at slack.com whatever SLACK_API_URL says.
    settings.authorize = AsyncInstallationStoreAuthorize(
        logger=log,
        installation_store=installations,
        client_id=client_id,
        client_secret=client_secret,
        token_rotation_expiration_minutes=ROTATE_MINUTES,
        client=AsyncWebClient(base_url=api),
    )
    return Distribution(settings, installations, Workspaces(installations, rotator, api))
