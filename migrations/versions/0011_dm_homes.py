"""Direct messages keep their memory: a platform user's DM home, chosen once and kept.

Before, a Discord DM belonged to the only server the bot was in; once the bot joined a
second server, new DMs went to a fresh `discord:dm` agent and the earlier memory was
detached. `dm_homes` records, per platform user, the community whose agent their DMs use.

Existing deployments: a user who already has an agent in exactly one Discord community gets
that community as their home, so nothing changes for them; the others choose at their next
DM (see core.members.dm_homes).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

OPERATOR = "NULLIF(current_setting('companion.agent_id', true), '')::bigint IS NULL"
MINE = (
    "tenant_id = NULLIF(current_setting('companion.tenant_id', true), '')::bigint AND user_id = "
    "(SELECT a.user_id FROM agents a "
    "WHERE a.id = NULLIF(current_setting('companion.agent_id', true), '')::bigint)"
)


def upgrade() -> None:
    op.create_table(
        "dm_homes",
        sa.Column("platform", sa.String, primary_key=True),
        sa.Column("external_id", sa.String, primary_key=True),
        sa.Column(
            "tenant_id",
            sa.BigInteger,
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "user_id", sa.BigInteger, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("chosen", sa.String, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("dm_homes_user", "dm_homes", ["user_id"])
    op.execute(
        f"CREATE POLICY member_scope ON dm_homes USING ({OPERATOR} OR ({MINE})) "
        f"WITH CHECK ({OPERATOR} OR ({MINE}))"
    )
    op.execute("ALTER TABLE dm_homes ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE dm_homes FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON dm_homes TO companion_member;
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'companion_member may not be granted dm_homes';
        END $$;
        """
    )
    op.execute(
        """
        INSERT INTO dm_homes (platform, external_id, tenant_id, user_id, chosen, updated_at)
        SELECT 'discord', u.external_id, min(u.tenant_id), min(u.id), 'memory', now()
        FROM users u JOIN tenants t ON t.id = u.tenant_id
        WHERE t.key LIKE 'discord:%'
        GROUP BY u.external_id
        HAVING count(*) = 1
        """
    )


def downgrade() -> None:
    op.drop_table("dm_homes")
