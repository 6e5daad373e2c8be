"""The memory inspector's sign-in: browser sessions, spent links, the signing secret."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    Index,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from core.models.base import TS, Base


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
