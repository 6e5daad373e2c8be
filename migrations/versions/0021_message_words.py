"""Which messages hold each word, in a table the member's wall lets an index read.

    message_words (tenant_id, agent_id, lexeme, message_id, words)
        primary key     (tenant_id, agent_id, lexeme, message_id) INCLUDE (words): ranking
                        by key words is an index-only scan of the query's words
        foreign key     (tenant_id, agent_id) -> agents (tenant_id, id) ON DELETE CASCADE
        wall            the member policy of 0009, FORCE ROW LEVEL SECURITY
    messages_event      (tenant_id, event_id) of the messages an event brought: the search
                        during a turn leaves out the turn's own messages by it
    messages_tsv        (the GIN index of messages.tsv) dropped: nothing reads it any more

`words` is the message's number of distinct lexemes (the length of its `tsv`), which the
score divides by. Why a table: in a member's transaction, row-level security evaluates its
policy before any condition whose operator is not leakproof, and `tsvector @@ tsquery` is
not, so Postgres would not use `messages_tsv` there and read every message of the agent
instead (86 ms at 100,000 messages; bench/README.md, "Key words under the wall"). Text and
integer equality are leakproof: a lookup of (tenant, agent, lexeme) is an index scan inside
the wall. Kept by the application with `message_terms` (core.memory.terms), not a trigger:
a distributed Postgres (Citus) runs none on distributed tables. About 10 rows and 1.1 KB per
message of 1-3 chat sentences.

The upgrade writes every searchable message's words: about as long as the migration 0019
took to count them, and writes to `messages` wait meanwhile.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None
rewrites_tables = True  # lists the words of every message

AGENT = "NULLIF(current_setting('companion.agent_id', true), '')::bigint"
TENANT = "NULLIF(current_setting('companion.tenant_id', true), '')::bigint"
SCOPE = f"{AGENT} IS NULL OR (tenant_id = {TENANT} AND agent_id = {AGENT})"  # as 0009


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_words (
            tenant_id bigint NOT NULL,
            agent_id bigint NOT NULL,
            lexeme text NOT NULL,
            message_id bigint NOT NULL,
            words integer NOT NULL,
            CONSTRAINT message_words_agent_id_fkey FOREIGN KEY (tenant_id, agent_id)
                REFERENCES agents (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO message_words (tenant_id, agent_id, lexeme, message_id, words) "
        "SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM messages, "
        "unnest(tsvector_to_array(tsv)) AS lexeme WHERE search_text IS NOT NULL"
    )
    op.execute(
        "ALTER TABLE message_words ADD CONSTRAINT message_words_pkey "
        "PRIMARY KEY (tenant_id, agent_id, lexeme, message_id) INCLUDE (words)"
    )
    op.execute(f"CREATE POLICY member_scope ON message_words USING ({SCOPE}) WITH CHECK ({SCOPE})")
    op.execute("ALTER TABLE message_words ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE message_words FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'companion_member') THEN
                EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON message_words
                    TO companion_member';
            END IF;
        END $$;
        """
    )
    op.execute(
        "CREATE INDEX messages_event ON messages (tenant_id, event_id) WHERE event_id IS NOT NULL"
    )
    op.execute("DROP INDEX messages_tsv")


def downgrade() -> None:
    op.execute("CREATE INDEX messages_tsv ON messages USING gin (tsv)")
    op.execute("DROP INDEX messages_event")
    op.execute("DROP TABLE message_words")
