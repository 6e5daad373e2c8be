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

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy import text as sql  # a column here is called `text`
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TS = DateTime(timezone=True)


class Base(DeclarativeBase):
    pass


def _tenant_fk() -> Mapped[int]:
    return mapped_column(BigInteger, ForeignKey("tenants.id", ondelete="CASCADE"), index=False)


def _tenant() -> Mapped[int]:
    """`tenant_id` of a table that reaches the tenant through its agent's key alone."""
    return mapped_column(BigInteger)


def _agent() -> Mapped[int]:
    """`agent_id`; its foreign key is `_owned_by`'s, with the tenant (migration 0017)."""
    return mapped_column(BigInteger)


def _owned_by(table: str, column: str, target: str) -> ForeignKeyConstraint:
    """The key of a member's row to its owner, tenant first (migration 0017): deleting the
    owner deletes the row. Named as the database has named it since before 0017."""
    return ForeignKeyConstraint(
        ["tenant_id", column],
        [f"{target}.tenant_id", f"{target}.id"],
        ondelete="CASCADE",
        name=f"{table}_{column}_fkey",
    )


def _by_id(table: str) -> Index:
    """Rows found by `id` alone (ids are unique across tenants; the key is (tenant_id, id))."""
    return Index(f"{table}_id", "id")


ZERO = sql("0")


class Meta(Base):
    """Deployment facts fixed at schema creation, e.g. the embedding dimension."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text, nullable=True)  # always written (migration 0001)


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    key: Mapped[str] = mapped_column(String, unique=True)
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, default=dict, server_default=sql("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    # When the platform removed the bot (a Slack workspace uninstalled the app): its memory
    # is erased once the grace period has passed (core.members.tenancy).
    departed_at: Mapped[datetime | None] = mapped_column(TS)


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "external_id"), _by_id("users"))
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    external_id: Mapped[str] = mapped_column(String)
    display_name: Mapped[str | None] = mapped_column(String)
    timezone: Mapped[str] = mapped_column(String, default="UTC", server_default="UTC")
    # The member's own choices: {"openers": bool, "quiet_hours": "22:00-09:00"}.
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, default=dict, server_default=sql("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class DmHome(Base):
    """Whose memory a platform user's direct messages use: one community's agent of theirs.

    A DM comes from no server, so the member's DM conversation is tied to one community
    (tenant) once, and stays there whatever servers the bot joins later; the member may
    choose another. Erasing the member in that community (forget me) erases the choice.
    """

    __tablename__ = "dm_homes"
    __table_args__ = (_owned_by("dm_homes", "user_id", "users"), Index("dm_homes_user", "user_id"))
    platform: Mapped[str] = mapped_column(String, primary_key=True)  # "discord"
    external_id: Mapped[str] = mapped_column(String, primary_key=True)  # the platform user id
    tenant_id: Mapped[int] = _tenant_fk()
    user_id: Mapped[int] = mapped_column(BigInteger)
    chosen: Mapped[str] = mapped_column(String)  # why this community: see core.members.dm_homes
    updated_at: Mapped[datetime] = mapped_column(TS)


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (
        UniqueConstraint("tenant_id", "user_id", name="agents_user_id_key"),  # one per member
        _owned_by("agents", "user_id", "users"),
        _by_id("agents"),
        Index("agents_tenant", "tenant_id"),
        Index(
            "agents_opener_due",
            "next_opener_at",
            postgresql_where=sql("next_opener_at IS NOT NULL"),
        ),
        Index(
            "agents_upkeep_due",
            "next_upkeep_at",
            postgresql_where=sql("next_upkeep_at IS NOT NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    user_id: Mapped[int] = mapped_column(BigInteger)
    # True from the memory-pressure warning until the next flush: one warning per episode.
    pressure_warned: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    last_active_at: Mapped[datetime | None] = mapped_column(TS)  # the member's last message
    # Scheduled interrupts (core.schedule.planning): claimed when due, with FOR UPDATE SKIP LOCKED.
    next_opener_at: Mapped[datetime | None] = mapped_column(TS)
    last_opener_at: Mapped[datetime | None] = mapped_column(TS)
    openers_unanswered: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    next_upkeep_at: Mapped[datetime | None] = mapped_column(TS)
    # Moves on whenever the FIFO queue or summary changes (core.memory.store): a copy of
    # the main context kept between turns (core.memory.contexts) is valid for one version.
    context_version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # How the queued messages' tokens were counted (core.memory.prompt.count_basis).
    count_basis: Mapped[str | None] = mapped_column(String)


class Block(Base):
    __tablename__ = "blocks"
    __table_args__ = (_owned_by("blocks", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    label: Mapped[str] = mapped_column(String, primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    value: Mapped[str] = mapped_column(Text, default="", server_default="")
    char_limit: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        _owned_by("messages", "agent_id", "agents"),
        _by_id("messages"),
        Index("messages_agent", "agent_id", "id"),
        Index("messages_agent_time", "agent_id", "created_at"),
        # the FIFO queue
        Index("messages_in_context", "agent_id", "id", postgresql_where=sql("in_context")),
        # the searchable messages in order (a member's pages, the turns around a hit)
        Index(
            "messages_agent_order",
            "tenant_id",
            "agent_id",
            "id",
            postgresql_where=sql("search_text IS NOT NULL"),
        ),
        Index(
            "messages_event",
            "tenant_id",
            "event_id",
            postgresql_where=sql("event_id IS NOT NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    agent_id: Mapped[int] = _agent()
    event_id: Mapped[int | None] = mapped_column(BigInteger)
    # user | assistant | tool | system (system alerts, user actions, scheduled interrupts)
    role: Mapped[str] = mapped_column(String)
    content: Mapped[str | None] = mapped_column(Text)
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    tool_call_id: Mapped[str | None] = mapped_column(String)
    # What a person said or was told: the user's words, or the text of a send_message.
    search_text: Mapped[str | None] = mapped_column(Text)
    tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("companion_words(coalesce(search_text, ''))", persisted=True)
    )
    tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    in_context: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    created_at: Mapped[datetime] = mapped_column(TS)


class MessageVector(Base):
    """The embedding of a searchable message, beside it (migration 0018): the messages heap
    stays small for full text search. Stored with the message, `embedding` NULL; the
    embedding worker (core.memory.embeddings) fills it after the turn commits, never on
    the reply's path. Deleting the message deletes it."""

    __tablename__ = "message_vectors"
    __table_args__ = (
        _owned_by("message_vectors", "message_id", "messages"),
        _owned_by("message_vectors", "agent_id", "agents"),
        Index("message_vectors_agent", "tenant_id", "agent_id"),
        Index(
            "message_vectors_missing",
            "message_id",
            postgresql_where=sql("embedding IS NULL"),
        ),
        Index(
            "message_vectors_embedding",
            "embedding",
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
        ),
    )
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    agent_id: Mapped[int] = _agent()
    embedding: Mapped[Any] = mapped_column(HALFVEC(), nullable=True)


class MessageTerm(Base):
    """How many of the agent's searchable messages hold `lexeme` (core.memory.terms); the
    row with the empty lexeme counts the messages. Kept as messages are stored and deleted."""

    __tablename__ = "message_terms"
    __table_args__ = (_owned_by("message_terms", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    messages: Mapped[int] = mapped_column(Integer)


class MessageWord(Base):
    """One word (`lexeme`) of one searchable message, with the message's number of distinct
    words (core.memory.terms): what ranking by key words reads, by index, inside the member's
    wall. Kept as messages are stored and deleted."""

    __tablename__ = "message_words"
    __table_args__ = (_owned_by("message_words", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    words: Mapped[int] = mapped_column(Integer)


class Summary(Base):
    __tablename__ = "summaries"
    __table_args__ = (
        _owned_by("summaries", "agent_id", "agents"),
        _by_id("summaries"),
        Index("summaries_agent", "agent_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    agent_id: Mapped[int] = _agent()
    text: Mapped[str] = mapped_column(Text)
    # How many messages, in all, this summary stands for (it folds in the previous summary).
    covers_messages: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    created_at: Mapped[datetime] = mapped_column(TS)


class Passage(Base):
    __tablename__ = "passages"
    __table_args__ = (
        _owned_by("passages", "agent_id", "agents"),
        _by_id("passages"),
        Index("passages_agent", "agent_id", "id"),
        Index("passages_agent_order", "tenant_id", "agent_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    agent_id: Mapped[int] = _agent()
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(String)
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed("companion_words(text)", persisted=True))
    created_at: Mapped[datetime] = mapped_column(TS)
    event_id: Mapped[int | None] = mapped_column(BigInteger)  # a shared file's event


class PassageVector(Base):
    """The embedding of a passage, beside it (migration 0026), as a message's is: the
    passages heap stays narrow, and a member's vectors are read without their texts."""

    __tablename__ = "passage_vectors"
    __table_args__ = (
        _owned_by("passage_vectors", "passage_id", "passages"),
        _owned_by("passage_vectors", "agent_id", "agents"),
        Index("passage_vectors_agent", "tenant_id", "agent_id"),
        Index(
            "passage_vectors_missing",
            "passage_id",
            postgresql_where=sql("embedding IS NULL"),
        ),
        Index(
            "passage_vectors_embedding",
            "embedding",
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
        ),
    )
    passage_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    agent_id: Mapped[int] = _agent()
    embedding: Mapped[Any] = mapped_column(HALFVEC(), nullable=True)


class PassageWord(Base):
    """One word of one archival passage (migration 0022), as `MessageWord` for messages;
    goes with the passage."""

    __tablename__ = "passage_words"
    __table_args__ = (
        _owned_by("passage_words", "passage_id", "passages"),
        _owned_by("passage_words", "agent_id", "agents"),
        # ranking by key words reads (tenant, agent, word) and finds passage and count there
        Index(
            "passage_words_lookup",
            "tenant_id",
            "agent_id",
            "lexeme",
            postgresql_include=["passage_id", "words"],
        ),
    )
    passage_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    agent_id: Mapped[int] = _agent()
    words: Mapped[int] = mapped_column(Integer)


class PassageTerm(Base):
    """How many of the agent's archival passages hold `lexeme` (migration 0024), as
    `MessageTerm` for messages; the row with the empty lexeme counts the passages."""

    __tablename__ = "passage_terms"
    __table_args__ = (_owned_by("passage_terms", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[int] = _tenant()
    passages: Mapped[int] = mapped_column(Integer)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (
        # A redelivery is stored once per member (migration 0008; tenant first since 0017):
        # platform ids are not a member's.
        UniqueConstraint(
            "tenant_id", "agent_id", "dedup_key", name="events_agent_id_dedup_key_key"
        ),
        _owned_by("events", "agent_id", "agents"),
        _by_id("events"),
        Index("events_agent_time", "agent_id", "created_at"),
        Index("events_pending", "agent_id", "id", postgresql_where=sql("status = 'pending'")),
        # looked up without the member: is this platform message stored? (migration 0030)
        Index("events_dedup_key", "dedup_key"),
        Index("events_waiting", "created_at", postgresql_where=sql("status = 'waiting'")),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    agent_id: Mapped[int] = _agent()
    kind: Mapped[str] = mapped_column(String)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    dedup_key: Mapped[str | None] = mapped_column(String)
    status: Mapped[str] = mapped_column(  # core.events.EventStatus
        String, default="pending", server_default="pending"
    )
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)
    processed_at: Mapped[datetime | None] = mapped_column(TS)


class Usage(Base):
    """Model tokens one agent spent on one day (UTC): what the daily budgets count.

    Input not served from the provider's cache is tokens - cached_tokens - completion_tokens.
    """

    __tablename__ = "usage"
    __table_args__ = (
        _owned_by("usage", "agent_id", "agents"),
        Index("usage_tenant_day", "tenant_id", "day"),
    )
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    # prompt + completion
    tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default=ZERO)
    calls: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    # of the prompt, served from the provider's cache
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default=ZERO)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default=ZERO)


class AuditEntry(Base):
    """One admin action on member data: who did what to whom, and when."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("audit_log_tenant", "tenant_id", "id"),)
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    actor: Mapped[str] = mapped_column(String)
    action: Mapped[str] = mapped_column(String)
    target: Mapped[str | None] = mapped_column(String)
    detail: Mapped[dict[str, Any]] = mapped_column(
        JSONB, default=dict, server_default=sql("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = mapped_column(TS)


class Reply(Base):
    """One reply in the outbox: written with the turn, marked when delivered."""

    __tablename__ = "outbox"
    __table_args__ = (
        _owned_by("outbox", "agent_id", "agents"),
        _by_id("outbox"),
        Index("outbox_event", "event_id"),
        Index(
            "outbox_undelivered",
            "agent_id",
            "id",
            postgresql_where=sql("delivered_at IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = _tenant_fk()
    agent_id: Mapped[int] = _agent()
    event_id: Mapped[int | None] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)
    delivered_at: Mapped[datetime | None] = mapped_column(TS)
    # failed sends so far
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    last_error: Mapped[str | None] = mapped_column(Text)


class WebSession(Base):
    """A browser signed in with a link: whose memory it may see, until when.

    The browser holds a random token; only its SHA-256 is kept. `link_nonce` is the nonce of
    the link it was exchanged for, unique, so each link signs in once.
    """

    __tablename__ = "web_sessions"
    __table_args__ = (
        Index("web_sessions_expiry", "expires_at"),
        Index("web_sessions_member", "tenant", "member"),
    )
    token_hash: Mapped[str] = mapped_column(String, primary_key=True)
    tenant: Mapped[str] = mapped_column(String)  # the tenant key, e.g. discord:<guild id>
    member: Mapped[str | None] = mapped_column(String)  # the member; None: an admin's session
    actor: Mapped[str] = mapped_column(String)  # whom the link was for, as the audit log names
    csrf: Mapped[str] = mapped_column(String)  # what every form of this session carries
    link_nonce: Mapped[str] = mapped_column(String, unique=True)
    created_at: Mapped[datetime] = mapped_column(TS)
    expires_at: Mapped[datetime] = mapped_column(TS)


class SigningSecret(Base):
    """The secret that signs sign-in links when COMPANION_SECRET_KEY is not set: one row,
    readable by the app's own role only (migration 0029 revokes it from everyone else)."""

    __tablename__ = "signing_secret"
    one: Mapped[bool] = mapped_column(
        Boolean, primary_key=True, default=True, server_default="true"
    )
    value: Mapped[str] = mapped_column(Text)


class SpentLink(Base):
    """A sign-in link that was used, kept until the link itself expires (its own expiry,
    not this process's link lifetime), whatever sessions or members are erased meanwhile."""

    __tablename__ = "spent_links"
    __table_args__ = (Index("spent_links_expiry", "expires_at"),)
    nonce: Mapped[str] = mapped_column(String, primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(TS)
