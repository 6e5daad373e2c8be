"""Who is who and what happens: tenants, members and their agents, events in, replies out,
usage, the audit log, and the deployment's facts (`meta`)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy import text as sql  # a column here is called `text`
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from core.models.base import TS, ZERO, Base, agent_column, by_id, owned_by, tenant_fk


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
    # is erased once the grace period has passed (core.tenants.tenancy).
    departed_at: Mapped[datetime | None] = mapped_column(TS)


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "external_id"), by_id("users"))
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
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
    __table_args__ = (owned_by("dm_homes", "user_id", "users"), Index("dm_homes_user", "user_id"))
    platform: Mapped[str] = mapped_column(String, primary_key=True)  # "discord"
    external_id: Mapped[str] = mapped_column(String, primary_key=True)  # the platform user id
    tenant_id: Mapped[int] = tenant_fk()
    user_id: Mapped[int] = mapped_column(BigInteger)
    chosen: Mapped[str] = mapped_column(String)  # why this community: see core.members.dm_homes
    updated_at: Mapped[datetime] = mapped_column(TS)


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (
        UniqueConstraint("tenant_id", "user_id", name="agents_user_id_key"),  # one per member
        owned_by("agents", "user_id", "users"),
        by_id("agents"),
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
    tenant_id: Mapped[int] = tenant_fk()
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


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (
        # A redelivery is stored once per member (migration 0008; tenant first since 0017):
        # platform ids are not a member's.
        UniqueConstraint(
            "tenant_id", "agent_id", "dedup_key", name="events_agent_id_dedup_key_key"
        ),
        owned_by("events", "agent_id", "agents"),
        by_id("events"),
        Index("events_agent_time", "agent_id", "created_at"),
        Index("events_pending", "agent_id", "id", postgresql_where=sql("status = 'pending'")),
        # looked up without the member: is this platform message stored? (migration 0030)
        Index("events_dedup_key", "dedup_key"),
        Index("events_waiting", "created_at", postgresql_where=sql("status = 'waiting'")),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
    agent_id: Mapped[int] = agent_column()
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
        owned_by("usage", "agent_id", "agents"),
        Index("usage_tenant_day", "tenant_id", "day"),
    )
    agent_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
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
    tenant_id: Mapped[int] = tenant_fk()
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
        owned_by("outbox", "agent_id", "agents"),
        by_id("outbox"),
        Index("outbox_event", "event_id"),
        Index(
            "outbox_undelivered",
            "agent_id",
            "id",
            postgresql_where=sql("delivered_at IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    tenant_id: Mapped[int] = tenant_fk()
    agent_id: Mapped[int] = agent_column()
    event_id: Mapped[int | None] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)
    delivered_at: Mapped[datetime | None] = mapped_column(TS)
    # failed sends so far
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    last_error: Mapped[str | None] = mapped_column(Text)
