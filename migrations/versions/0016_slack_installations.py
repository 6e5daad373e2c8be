"""Slack in any workspace: installations and OAuth states, and when a workspace left.

`slack_installations`, `slack_bots` and `slack_oauth_states` are slack_sdk's own tables for
its async SQLAlchemy stores (`AsyncSQLAlchemyInstallationStore`,
`AsyncSQLAlchemyOAuthStateStore`), written out here so that the schema changes only with a
migration; tests/test_slack_oauth.py checks the stores still match them. They hold bot
tokens, not member data: no row-level security, no member policy (the installation is
looked up from Slack's team id before any member is known).

`tenants.departed_at`: when the workspace removed the app (or revoked its bot token). Its
memory is kept for a grace period (core/tenants/tenancy.py), then erased.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TOKENS = (
    ("bot_token", 200),
    ("bot_id", 32),
    ("bot_user_id", 32),
    ("bot_scopes", 1000),
    ("bot_refresh_token", 200),
)


def _common() -> list[sa.Column]:
    """The columns slack_sdk's bots and installations tables share (slack_sdk 3.x)."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("client_id", sa.String(32), nullable=False),
        sa.Column("app_id", sa.String(32), nullable=False),
        sa.Column("enterprise_id", sa.String(32)),
        sa.Column("enterprise_name", sa.String(200)),
    ]


def _bot() -> list[sa.Column]:
    return [
        sa.Column("team_id", sa.String(32)),
        sa.Column("team_name", sa.String(200)),
        *(sa.Column(name, sa.String(size)) for name, size in TOKENS),
        sa.Column("bot_token_expires_at", sa.DateTime),
    ]


def upgrade() -> None:
    op.create_table(
        "slack_installations",
        *_common(),
        sa.Column("enterprise_url", sa.String(200)),
        *_bot(),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("user_token", sa.String(200)),
        sa.Column("user_scopes", sa.String(1000)),
        sa.Column("user_refresh_token", sa.String(200)),
        sa.Column("user_token_expires_at", sa.DateTime),
        sa.Column("incoming_webhook_url", sa.String(200)),
        sa.Column("incoming_webhook_channel", sa.String(200)),
        sa.Column("incoming_webhook_channel_id", sa.String(200)),
        sa.Column("incoming_webhook_configuration_url", sa.String(200)),
        sa.Column("is_enterprise_install", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("token_type", sa.String(32)),
        sa.Column("installed_at", sa.DateTime, nullable=False, server_default=sa.func.now()),
    )
    op.create_index(
        "slack_installations_idx",
        "slack_installations",
        ["client_id", "enterprise_id", "team_id", "user_id", "installed_at"],
    )
    op.create_table(
        "slack_bots",
        *_common(),
        *_bot(),
        sa.Column("is_enterprise_install", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("installed_at", sa.DateTime, nullable=False, server_default=sa.func.now()),
    )
    op.create_index(
        "slack_bots_idx", "slack_bots", ["client_id", "enterprise_id", "team_id", "installed_at"]
    )
    op.create_table(
        "slack_oauth_states",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("state", sa.String(200), nullable=False),
        sa.Column("expire_at", sa.DateTime, nullable=False),
    )
    op.add_column("tenants", sa.Column("departed_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("tenants", "departed_at")
    op.drop_table("slack_oauth_states")
    op.drop_table("slack_bots")
    op.drop_table("slack_installations")
