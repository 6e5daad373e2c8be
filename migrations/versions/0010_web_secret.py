"""The memory inspector: a signing secret kept in `meta`, and browser sessions.

`meta.secret_key` signs sign-in links unless COMPANION_SECRET_KEY is set; it is generated
here, once. `web_sessions` holds the hash of each signed-in browser's token (see
`core.tenants.access`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("token_hash", sa.String, primary_key=True),
        sa.Column("tenant", sa.String, nullable=False),
        sa.Column("member", sa.String),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("csrf", sa.String, nullable=False),
        sa.Column("link_nonce", sa.String, nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("web_sessions_expiry", "web_sessions", ["expires_at"])
    op.create_index("web_sessions_member", "web_sessions", ["tenant", "member"])
    meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))
    op.bulk_insert(meta, [{"key": "secret_key", "value": secrets.token_hex(32)}])


def downgrade() -> None:
    op.execute("DELETE FROM meta WHERE key = 'secret_key'")
    op.drop_table("web_sessions")
