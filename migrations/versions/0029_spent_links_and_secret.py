"""A spent sign-in link stays spent until it would have expired, whatever else is erased.

    spent_links (nonce PRIMARY KEY, expires_at)

Until now the only record that a link was used was the `web_sessions` row it became, so
anything that deleted sessions (`companion tenant erase`, the erase after a community's
grace period, a replica sweeping with a shorter COMPANION_LINK_MINUTES than the link was
made with) made a used link sign in again within its lifetime. Here each used link's nonce
is kept with the link's own expiry, read from the link itself; the row holds no member's
data, so no erase touches it, and it is swept only once that expiry has passed.

Sessions that exist now keep their links spent: each one's nonce is copied with an expiry
a day past the session's own (no link lives that long; the row goes at the first sweep
after).

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spent_links",
        sa.Column("nonce", sa.String, primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("spent_links_expiry", "spent_links", ["expires_at"])
    op.execute(
        "INSERT INTO spent_links (nonce, expires_at) "
        "SELECT link_nonce, expires_at + interval '1 day' FROM web_sessions "
        "ON CONFLICT DO NOTHING"
    )


def downgrade() -> None:
    op.drop_table("spent_links")
