"""A spent sign-in link stays spent until it would have expired, whatever else is erased;
the secret that signs links is readable by the app's own role only.

    spent_links (nonce PRIMARY KEY, expires_at)
    signing_secret (one row: value), moved out of `meta`

Until now the only record that a link was used was the `web_sessions` row it became, so
anything that deleted sessions (`companion tenant erase`, the erase after a community's
grace period, a replica sweeping with a shorter COMPANION_LINK_MINUTES than the link was
made with) made a used link sign in again within its lifetime. Here each used link's nonce
is kept with the link's own expiry, read from the link itself; the row holds no member's
data, so no erase touches it, and it is swept only once that expiry has passed.

Sessions that exist now keep their links spent: each one's nonce is copied with an expiry
a day past the session's own (no link lives that long; the row goes at the first sweep
after).

The secret that signs sign-in links (when COMPANION_SECRET_KEY is not set) was a row of
`meta`, which the role `companion_member` may read (0006), and so may any role an operator
grants `meta` to for the embedding dimension: whoever read it could sign an admin link for
every community. It moves to `signing_secret`, owned by the app's role, with every privilege
revoked from PUBLIC and granted to nobody. A database superuser, and a backup or replica of
the whole database, still hold it: COMPANION_SECRET_KEY keeps it out of the database.

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


SECRET = "INSERT INTO signing_secret (value) SELECT value FROM meta WHERE key = 'secret_key'"


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
    op.create_table(
        "signing_secret",
        sa.Column("one", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column("value", sa.Text, nullable=False),
        sa.CheckConstraint("one", name="signing_secret_one_row"),
    )
    op.execute(SECRET)
    op.execute("DELETE FROM meta WHERE key = 'secret_key'")
    op.execute("REVOKE ALL ON signing_secret FROM PUBLIC")


def downgrade() -> None:
    op.execute("INSERT INTO meta (key, value) SELECT 'secret_key', value FROM signing_secret")
    op.drop_table("signing_secret")
    op.drop_table("spent_links")
