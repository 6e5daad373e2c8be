"""Who may open the memory inspector: signed sign-in links, each exchanged once for a session.

    link(tenant, member, actor)   a URL to the inspector, signed, valid for `link_ttl`
    check(token) -> Grant         what a link grants; `LinkRefused` when tampered or expired
    redeem(token) -> (cookie, Viewer)   a new session; a link signs in once
    viewer(cookie) -> Viewer      the live session behind a browser's cookie, or None; an
                                  admin's only while the platform still says admin
    sign_out(cookie), sign_out_member(tenant, member)

A link's token is `<payload>.<signature>` in base64url: the payload names the tenant, the
member (none for an admin of the tenant), whom it was issued to, its expiry and a random
nonce; the signature is HMAC-SHA256 under the deployment's secret (COMPANION_SECRET_KEY, else
the one migration 0010 generated, kept in `signing_secret`, which only the app's role
reads). The browser keeps a random session token and
the database only its SHA-256, so a copy of the table opens nothing. A used link's nonce is
kept in `spent_links` until the link's own expiry (migration 0029), apart from the sessions:
no sign-out, forget or erase frees it, and no replica's shorter link lifetime sweeps it
early. `Viewer.may_see` is the one rule of who reads whose memory: a member only their own,
an admin anyone in their tenant.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.errors import LinkRefused
from core.models import SigningSecret, SpentLink, WebSession
from core.ports import AdminRights

SIGN_IN_PATH = "/signin"
LINK_TTL = timedelta(minutes=15)
SESSION_TTL = {"member": timedelta(hours=12), "admin": timedelta(hours=1)}
RIGHTS_TTL = timedelta(minutes=1)  # how long a platform's "still an admin" is taken as true
OPERATOR = "operator "  # how `companion link --admin` names its actor: no platform to ask
_PURPOSE = b"companion sign-in link v1"


@dataclass(frozen=True)
class Grant:
    """What one sign-in link grants."""

    tenant: str
    member: str | None  # None: an admin of the tenant
    actor: str  # whom it was issued to: the member, or the admin as the audit log names them
    expires_at: datetime
    nonce: str


@dataclass(frozen=True)
class Viewer:
    """A signed-in browser."""

    tenant: str
    member: str | None  # None: an admin of the tenant
    actor: str
    csrf: str  # the token every form of this session must carry
    expires_at: datetime

    @property
    def is_admin(self) -> bool:
        return self.member is None

    def may_see(self, member: str) -> bool:
        """A member sees only their own memory; an admin any member of their own tenant."""
        return self.is_admin or self.member == member


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def sign(key: bytes, grant: Grant) -> str:
    payload = {
        "t": grant.tenant,
        "m": grant.member,
        "a": grant.actor,
        "e": int(grant.expires_at.timestamp()),
        "n": grant.nonce,
    }
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    signature = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(signature)}"


def unsign(key: bytes, token: str, now: datetime, ttl: timedelta) -> Grant:
    """The grant of a token this deployment signed, unexpired; `LinkRefused` otherwise."""
    bad = LinkRefused(
        "bad", "This sign-in link is not valid: it may be cut short or changed. Ask for a new one."
    )
    body, _, signature = token.strip().partition(".")
    try:
        expected = hmac.new(key, body.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _unb64(signature)):
            raise bad
        payload = json.loads(_unb64(body))
        grant = Grant(
            tenant=str(payload["t"]),
            member=None if payload["m"] is None else str(payload["m"]),
            actor=str(payload["a"]),
            expires_at=datetime.fromtimestamp(int(payload["e"]), UTC),
            nonce=str(payload["n"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeError):
        raise bad from None
    if grant.expires_at <= now:
        minutes = int(ttl.total_seconds() // 60)
        raise LinkRefused(
            "expired",
            f"This sign-in link has expired (links work for {minutes} minutes). Ask for a new one.",
        )
    return grant


def _used() -> LinkRefused:
    return LinkRefused("used", "This sign-in link was already used. Ask for a new one.")


class Access:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Callable[[], datetime],
        base_url: str,
        secret: str | None = None,
        link_ttl: timedelta = LINK_TTL,
        rights: AdminRights | None = None,
    ) -> None:
        self.sessions = sessions
        self.rights = rights  # set by `companion run` once its platforms are served
        self._rights_seen: dict[tuple[str, str], tuple[bool | None, datetime]] = {}
        self.clock = clock
        self.base_url = base_url.rstrip("/")
        self.link_ttl = link_ttl
        self._secret = secret
        self._key: bytes | None = None

    async def key(self) -> bytes:
        if self._key is None:
            secret = self._secret or await self._stored_secret()
            self._key = hmac.new(secret.encode(), _PURPOSE, hashlib.sha256).digest()
        return self._key

    async def _stored_secret(self) -> str:
        """The secret in `signing_secret`; made here if it is missing (migration 0010 made
        it first, and 0029 moved it out of `meta`, which other roles may read)."""
        async with self.sessions() as session, session.begin():
            await session.execute(
                insert(SigningSecret)
                .values(one=True, value=secrets.token_hex(32))
                .on_conflict_do_nothing()
            )
            value = await session.scalar(select(SigningSecret.value))
            assert value is not None
            return value

    async def link(self, tenant: str, member: str | None, actor: str) -> str:
        """A sign-in URL for `member` of `tenant` (None: for the admin named `actor`)."""
        grant = Grant(
            tenant, member, actor, self.clock() + self.link_ttl, secrets.token_urlsafe(12)
        )
        token = sign(await self.key(), grant)
        return f"{self.base_url}{SIGN_IN_PATH}?token={quote(token)}"

    async def check(self, token: str) -> Grant:
        """What the link grants, if it is genuine, unexpired and unused."""
        grant = unsign(await self.key(), token, self.clock(), self.link_ttl)
        async with self.sessions() as session:
            spent = await session.scalar(
                select(SpentLink.nonce).where(SpentLink.nonce == grant.nonce)
            )
        if spent is not None:
            raise _used()
        return grant

    async def redeem(self, token: str) -> tuple[str, Viewer]:
        """A new session for a valid link, once: the second use is refused."""
        grant = await self.check(token)
        now = self.clock()
        cookie = secrets.token_urlsafe(32)
        ttl = SESSION_TTL["admin" if grant.member is None else "member"]
        viewer = Viewer(
            grant.tenant, grant.member, grant.actor, secrets.token_urlsafe(24), now + ttl
        )
        async with self.sessions() as session, session.begin():
            # The link is spent first, until its own expiry: whatever deletes sessions later
            # (sign-out, forget, tenant erase), it never signs in again.
            spent = await session.scalar(
                insert(SpentLink)
                .values(nonce=grant.nonce, expires_at=grant.expires_at)
                .on_conflict_do_nothing()
                .returning(SpentLink.nonce)
            )
            if spent is None:  # another request redeemed it first
                raise _used()
            await session.execute(delete(WebSession).where(WebSession.expires_at < now))
            await session.execute(delete(SpentLink).where(SpentLink.expires_at < now))
            await session.execute(
                insert(WebSession).values(
                    token_hash=_hash(cookie),
                    tenant=viewer.tenant,
                    member=viewer.member,
                    actor=viewer.actor,
                    csrf=viewer.csrf,
                    link_nonce=grant.nonce,
                    created_at=now,
                    expires_at=viewer.expires_at,
                )
            )
        return cookie, viewer

    async def viewer(self, cookie: str | None) -> Viewer | None:
        if not cookie:
            return None
        async with self.sessions() as session:
            row = await session.scalar(
                select(WebSession).where(
                    WebSession.token_hash == _hash(cookie), WebSession.expires_at > self.clock()
                )
            )
        if row is None:
            return None
        if row.member is None and await self._demoted(row.tenant, row.actor):
            await self._end(WebSession.token_hash == row.token_hash)
            return None
        return Viewer(row.tenant, row.member, row.actor, row.csrf, row.expires_at)

    async def _demoted(self, tenant: str, actor: str) -> bool:
        """Whether the platform now says `actor` is no admin of `tenant` (asked at most once
        a minute per admin). An operator's link, or a platform this process does not serve,
        keeps the rights the link was made with, for the session's hour."""
        if self.rights is None or actor.startswith(OPERATOR):
            return False
        now = self.clock()
        seen = self._rights_seen.get((tenant, actor))
        if seen is None or seen[1] <= now:
            seen = (await self.rights.is_admin(tenant, actor), now + RIGHTS_TTL)
            self._rights_seen[(tenant, actor)] = seen
        return seen[0] is False

    async def sign_out(self, cookie: str) -> None:
        await self._end(WebSession.token_hash == _hash(cookie))

    async def sign_out_member(self, tenant: str, member: str) -> None:
        """End every session of a member (after they erased their memory)."""
        await self._end((WebSession.tenant == tenant) & (WebSession.member == member))

    async def _end(self, which: object) -> None:
        async with self.sessions() as session, session.begin():
            await session.execute(delete(WebSession).where(which))  # type: ignore[arg-type]
