"""Each agent's passage counts, kept instead of counted on every archival search.

    passage_terms (tenant_id, agent_id, lexeme, passages)
        primary key     (tenant_id, agent_id, lexeme)
        foreign key     (tenant_id, agent_id) -> agents (tenant_id, id) ON DELETE CASCADE
        wall            the member policy of 0009, FORCE ROW LEVEL SECURITY

What `message_terms` (0019) is for messages: `passages` counts the agent's passages holding
`lexeme`, and the row with the empty lexeme counts the passages. Before, an archival search
by key words counted the agent's passages on every query, reading each one under the
member's policy: 54 of its 64 ms at 100,000 passages. Written with each passage
(`terms.list_passage`), taken back in the statement that deletes passages
(`terms.counted_delete`: one from the member's page, or all when memory is cleared); gone
with the agent. The upgrade counts the passages there.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None
rewrites_tables = True  # counts the words of every passage

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE passage_terms (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            lexeme text NOT NULL,
            passages integer NOT NULL,
            CONSTRAINT passage_terms_pkey PRIMARY KEY (tenant_id, agent_id, lexeme),
            CONSTRAINT passage_terms_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO passage_terms (tenant_id, agent_id, lexeme, passages) "
        "SELECT tenant_id, agent_id, lexeme, count(*) FROM passages, "
        "unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme "
        "GROUP BY tenant_id, agent_id, lexeme"
    )
    op.execute(f"CREATE POLICY member_scope ON passage_terms USING ({SCOPE}) WITH CHECK ({SCOPE})")
    op.execute("ALTER TABLE passage_terms ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE passage_terms FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON passage_terms
                    TO companion_member';
            END IF;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE passage_terms")
