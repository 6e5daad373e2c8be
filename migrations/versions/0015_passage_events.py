"""Passages name the event that stored them: a shared file's passages belong to its event.

`passages.event_id` is set for the passages of a shared file (the file's user-action event)
and NULL for the rest (archival inserts, imports). `import --replace` keeps the passages of
events not yet answered, as it keeps the events: a file shared just before or during an
import is answered after it, and its text is still in archival memory then.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE passages ADD COLUMN event_id bigint")


def downgrade() -> None:
    op.execute("ALTER TABLE passages DROP COLUMN event_id")
