"""A member's memory: working context (blocks), recall storage (messages, their vectors and
word index), summaries, archival storage (passages, their vectors and word index)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    Identity,
    Index,
    Integer,
    String,
    Text,
    func,
)
from sqlalchemy import text as sql  # a column here is called `text`
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from core.models.base import TS, ZERO, Base, agent_column, by_id, owned_by, tenant_column, tenant_fk


def _vectors_beside(table: str, key: str, rows: str) -> tuple[Any, ...]:
    """A table of vectors beside `rows` (one per row, by `key`), owned by the row and the
    agent: the member's vectors, the ones still waiting (`embedding` NULL) and the HNSW
    index that nearest-neighbour search reads."""
    return (
        owned_by(table, key, rows),
        owned_by(table, "agent_id", "agents"),
        Index(f"{table}_agent", "tenant_id", "agent_id"),
        Index(f"{table}_missing", key, postgresql_where=sql("embedding IS NULL")),
        Index(
            f"{table}_embedding",
            "embedding",
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
        ),
    )


class Block(Base):
    __tablename__ = "blocks"
    __table_args__ = (owned_by("blocks", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    label: Mapped[str] = mapped_column(String, primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
    value: Mapped[str] = mapped_column(Text, default="", server_default="")
    char_limit: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        owned_by("messages", "agent_id", "agents"),
        by_id("messages"),
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
    tenant_id: Mapped[int] = tenant_fk()
    agent_id: Mapped[int] = agent_column()
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
    __table_args__ = _vectors_beside("message_vectors", "message_id", "messages")
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = tenant_column()
    agent_id: Mapped[int] = agent_column()
    embedding: Mapped[Any] = mapped_column(HALFVEC(), nullable=True)


class MessageTerm(Base):
    """How many of the agent's searchable messages hold `lexeme` (core.memory.terms); the
    row with the empty lexeme counts the messages. Kept as messages are stored and deleted."""

    __tablename__ = "message_terms"
    __table_args__ = (owned_by("message_terms", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[int] = tenant_column()
    messages: Mapped[int] = mapped_column(Integer)


class MessageWord(Base):
    """One word (`lexeme`) of one searchable message, with the message's number of distinct
    words (core.memory.terms): what ranking by key words reads, by index, inside the member's
    wall. Kept as messages are stored and deleted."""

    __tablename__ = "message_words"
    __table_args__ = (owned_by("message_words", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = tenant_column()
    words: Mapped[int] = mapped_column(Integer)


class Summary(Base):
    __tablename__ = "summaries"
    __table_args__ = (
        owned_by("summaries", "agent_id", "agents"),
        by_id("summaries"),
        Index("summaries_agent", "agent_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
    agent_id: Mapped[int] = agent_column()
    text: Mapped[str] = mapped_column(Text)
    # How many messages, in all, this summary stands for (it folds in the previous summary).
    covers_messages: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    created_at: Mapped[datetime] = mapped_column(TS)


class Passage(Base):
    __tablename__ = "passages"
    __table_args__ = (
        owned_by("passages", "agent_id", "agents"),
        by_id("passages"),
        Index("passages_agent", "agent_id", "id"),
        Index("passages_agent_order", "tenant_id", "agent_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
    agent_id: Mapped[int] = agent_column()
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(String)
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed("companion_words(text)", persisted=True))
    created_at: Mapped[datetime] = mapped_column(TS)
    event_id: Mapped[int | None] = mapped_column(BigInteger)  # a shared file's event


class PassageVector(Base):
    """The embedding of a passage, beside it (migration 0026), as a message's is: the
    passages heap stays narrow, and a member's vectors are read without their texts."""

    __tablename__ = "passage_vectors"
    __table_args__ = _vectors_beside("passage_vectors", "passage_id", "passages")
    passage_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = tenant_column()
    agent_id: Mapped[int] = agent_column()
    embedding: Mapped[Any] = mapped_column(HALFVEC(), nullable=True)


class PassageWord(Base):
    """One word of one archival passage (migration 0022), as `MessageWord` for messages;
    goes with the passage."""

    __tablename__ = "passage_words"
    __table_args__ = (
        owned_by("passage_words", "passage_id", "passages"),
        owned_by("passage_words", "agent_id", "agents"),
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
    tenant_id: Mapped[int] = tenant_column()
    agent_id: Mapped[int] = agent_column()
    words: Mapped[int] = mapped_column(Integer)


class PassageTerm(Base):
    """How many of the agent's archival passages hold `lexeme` (migration 0024), as
    `MessageTerm` for messages; the row with the empty lexeme counts the passages."""

    __tablename__ = "passage_terms"
    __table_args__ = (owned_by("passage_terms", "agent_id", "agents"),)
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[int] = tenant_column()
    passages: Mapped[int] = mapped_column(Integer)
