"""Which archival passages hold each word, as 0021 did for messages.

    passage_words (tenant_id, agent_id, lexeme, passage_id, words)
        primary key     (tenant_id, passage_id, lexeme)
        index           passage_words_lookup (tenant_id, agent_id, lexeme)
                        INCLUDE (passage_id, words): ranking by key words, index-only
        foreign keys    (tenant_id, passage_id) -> passages (tenant_id, id) and
                        (tenant_id, agent_id) -> agents (tenant_id, id), ON DELETE CASCADE:
                        a passage's words go whenever the passage goes (the member's page,
                        reset, import --replace, tenant erase)
        wall            the member policy of 0009, FORCE ROW LEVEL SECURITY
    passages_tsv        (the GIN index of passages.tsv) dropped: nothing reads it any more

Inside the member's wall Postgres may not use `passages_tsv` for a full text match (0021
says why): an archival search by key words read every passage of the agent, 167 ms at
100,000 passages. Written by `AgentStore.add_passage`, the one way passages are stored.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None
rewrites_tables = True  # lists the words of every passage

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE passage_words (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            lexeme text NOT NULL,
            passage_id bigint NOT NULL,
            words integer NOT NULL,
            CONSTRAINT passage_words_passage_id_fkey FOREIGN KEY (tenant_id, passage_id)
                REFERENCES passages (tenant_id, id) ON DELETE CASCADE,
            CONSTRAINT passage_words_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO passage_words (tenant_id, agent_id, lexeme, passage_id, words) "
        "SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM passages, "
        "unnest(tsvector_to_array(tsv)) AS lexeme"
    )
    op.execute(
        "ALTER TABLE passage_words ADD CONSTRAINT passage_words_pkey "
        "PRIMARY KEY (tenant_id, passage_id, lexeme)"
    )
    op.execute(
        "CREATE INDEX passage_words_lookup ON passage_words (tenant_id, agent_id, lexeme) "
        "INCLUDE (passage_id, words)"
    )
    op.execute(f"CREATE POLICY member_scope ON passage_words USING ({SCOPE}) WITH CHECK ({SCOPE})")
    op.execute("ALTER TABLE passage_words ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE passage_words FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON passage_words
                    TO companion_member';
            END IF;
        END $$;
        """
    )
    op.execute("DROP INDEX passages_tsv")


def downgrade() -> None:
    op.execute("CREATE INDEX passages_tsv ON passages USING gin (tsv)")
    op.execute("DROP TABLE passage_words")
