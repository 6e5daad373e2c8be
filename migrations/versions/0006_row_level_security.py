"""Row-level security: the database's own wall between members.

A transaction that works for one member calls `companion_enter(tenant, agent)`: it records
the scope in transaction-local settings and switches to the role `companion_member`, for
which every table holding member data shows (and accepts) only that member's rows, even if
a query forgets its filter. Work for no single member (migrations, the scheduler's claims,
operator commands) keeps the connection's own role, which owns the tables and is not
subject to these policies. Where the role cannot be created (a managed server without
CREATEROLE), `companion_enter` only records the scope and the wall is the queries' filters.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

AGENT_TABLES = ("blocks", "messages", "summaries", "passages", "events", "outbox")
SCOPE = (
    "tenant_id = current_setting('companion.tenant_id')::bigint "
    "AND agent_id = current_setting('companion.agent_id')::bigint"
)
TENANT = "tenant_id = current_setting('companion.tenant_id')::bigint"
POLICIES = {
    **{table: SCOPE for table in AGENT_TABLES},
    "usage": TENANT,  # token counts only: the tenant's daily budget sums them
    "agents": f"{TENANT} AND id = current_setting('companion.agent_id')::bigint",
    "users": f"{TENANT} AND id = (SELECT a.user_id FROM agents a "
    "WHERE a.id = current_setting('companion.agent_id')::bigint)",
    "tenants": "id = current_setting('companion.tenant_id')::bigint",
}


def upgrade() -> None:
    op.execute(
        """
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                CREATE ROLE companion_member NOLOGIN;
            END IF;
            IF NOT pg_has_role(current_user, 'companion_member', 'MEMBER') THEN
                EXECUTE format('GRANT companion_member TO %I', current_user);
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'no role companion_member: row-level security stays off';
        END $$;
        """
    )
    op.execute(
        """
        CREATE FUNCTION companion_enter(tenant bigint, agent bigint) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM set_config('companion.tenant_id', tenant::text, true);
            PERFORM set_config('companion.agent_id', agent::text, true);
            IF pg_has_role(session_user, 'companion_member', 'MEMBER') THEN
                SET LOCAL ROLE companion_member;
            END IF;
        END $$;
        """
    )
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE format('GRANT USAGE ON SCHEMA %I TO companion_member', current_schema());
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON tenants, users, agents,
                    blocks, messages, summaries, passages, events, outbox, usage
                    TO companion_member');
                EXECUTE 'GRANT SELECT ON meta TO companion_member';
                EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO companion_member',
                               current_schema());
            END IF;
        END $$;
        """
    )
    for table, condition in POLICIES.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY member_scope ON {table} USING ({condition}) WITH CHECK ({condition})"
        )


def downgrade() -> None:
    for table in POLICIES:
        op.execute(f"DROP POLICY member_scope ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute("DROP FUNCTION companion_enter(bigint, bigint)")
