"""Each agent's term statistics, kept instead of counted on every search.

    message_terms (tenant_id, agent_id, lexeme, messages)
        primary key     (tenant_id, agent_id, lexeme)
        foreign key     (tenant_id, agent_id) -> agents (tenant_id, id) ON DELETE CASCADE
        wall            the member policy of 0009, FORCE ROW LEVEL SECURITY (the words are
                        the member's)

`messages` counts the agent's searchable messages holding `lexeme` (a lexeme of their
`tsv`); the row with the empty lexeme counts the searchable messages. Recall search ranks
by these (core.memory.terms): before, every search counted the agent's whole corpus and
each word's messages. The upgrade counts the messages there; `AgentStore` keeps the counts
from then on. Kept by the application, not a trigger: a distributed Postgres (Citus) runs
no triggers on distributed tables.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
rewrites_tables = True  # counts the words of every message

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_terms (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            lexeme text NOT NULL,
            messages integer NOT NULL,
            CONSTRAINT message_terms_pkey PRIMARY KEY (tenant_id, agent_id, lexeme),
            CONSTRAINT message_terms_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO message_terms (tenant_id, agent_id, lexeme, messages) "
        "SELECT tenant_id, agent_id, lexeme, count(*) FROM messages, "
        "unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme "
        "WHERE search_text IS NOT NULL GROUP BY tenant_id, agent_id, lexeme"
    )
    op.execute(f"CREATE POLICY member_scope ON message_terms USING ({SCOPE}) WITH CHECK ({SCOPE})")
    op.execute("ALTER TABLE message_terms ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE message_terms FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON message_terms
                    TO companion_member';
            END IF;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE message_terms")
