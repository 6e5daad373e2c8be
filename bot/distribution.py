"""Slack in any workspace, for the app: the install flow's stores on the app's database.

Both `companion run` (bot/platforms.py) and the REST-only router of `companion tick`
(bot/delivery.py) reach workspaces through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.app import App
from core.errors import ConfigError
from core.sealing import Sealer

if TYPE_CHECKING:
    from adapters.slack.oauth import Distribution


def slack_distribution(app: App) -> Distribution:
    """The install flow for any workspace (SLACK_CLIENT_ID), its stores in the app's database."""
    from adapters.slack.oauth import distribution

    settings = app.settings
    assert settings.slack_client_id and settings.slack_client_secret
    if not settings.secret_key:
        raise ConfigError(
            "SLACK_CLIENT_ID keeps each workspace's Slack tokens in the database, sealed with "
            "a key from COMPANION_SECRET_KEY: set it (32 characters or more, e.g. `openssl "
            "rand -hex 32`) and keep it; without it the tokens cannot be stored or read"
        )
    return distribution(
        settings.slack_client_id,
        settings.slack_client_secret,
        settings.base_url,
        app.sessions.kw["bind"],  # the AsyncEngine the sessions are bound to
        app.tenancy,
        Sealer(settings.secret_key, settings.previous_secret_key),
        settings.slack_api_url,
    )
