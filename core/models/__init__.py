"""The tables. One ORM class per concept; core logic uses these or small dataclasses.

Every row that belongs to a member carries `tenant_id` and `agent_id`; queries filter on both
(see `core.memory.store`). Deleting an agent cascades to everything it owns. In the database
every key of a member's data starts with `tenant_id` (migration 0017, ready for Citus); the
classes here map rows by `id`, which stays unique on its own.

    tenants ─< users ─ agents ─< blocks        working context (persona, human, ...)
                              ├─< messages      recall storage (text); `in_context`: FIFO
                              │     └─ message_vectors  a searchable message's embedding
                              ├─< message_terms  how many messages hold each word (ranking)
                              ├─< summaries     recursive summaries; the newest is FIFO slot 0
                              ├─< passages      archival storage (full text)
                              │     └─ passage_vectors  its embedding (pgvector)
                              ├─< events        inbound events, stored before any model call
                              ├─< outbox        replies waiting for delivery
                              └─< usage         tokens spent per day (budgets)
    tenants ─< audit_log                        admin actions on member data
    web_sessions                                browsers signed in to the memory inspector
    spent_links                                 sign-in links used, until they expire
    signing_secret                              signs links (no COMPANION_SECRET_KEY); app only
    slack_installations, slack_bots,            slack_sdk's own tables (a bot token per
    slack_oauth_states                          workspace); made by a migration, no ORM class
"""

from core.models.access import SigningSecret, SpentLink, WebSession
from core.models.base import Base
from core.models.community import Agent, AuditEntry, DmHome, Event, Meta, Reply, Tenant, Usage, User
from core.models.memory import (
    Block,
    Message,
    MessageTerm,
    MessageVector,
    MessageWord,
    Passage,
    PassageTerm,
    PassageVector,
    PassageWord,
    Summary,
)

__all__ = [
    "Agent",
    "AuditEntry",
    "Base",
    "Block",
    "DmHome",
    "Event",
    "Message",
    "MessageTerm",
    "MessageVector",
    "MessageWord",
    "Meta",
    "Passage",
    "PassageTerm",
    "PassageVector",
    "PassageWord",
    "Reply",
    "SigningSecret",
    "SpentLink",
    "Summary",
    "Tenant",
    "Usage",
    "User",
    "WebSession",
]
