"""The inspector's doors: who is signed in, whose pages they may open, and form tokens.

    member_page(handler)   /members/{user}/...: signed in, and `Viewer.may_see(user)`
    admin_page(handler)    /admin/...: signed in as an admin (of the session's tenant only)
    secured(handler)       every answer: no caching, no framing, no referrer; errors as a page

A page that changes something is a POST whose form carries the session's CSRF token; a
missing or wrong token is refused before the handler runs. The tenant always comes from
the session, never from the URL, so an admin link of one tenant cannot reach another's.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from urllib.parse import quote

from aiohttp import web

from bot.web.boundary import given, read
from core.tenants.access import Viewer

log = logging.getLogger(__name__)
COOKIE = "companion_session"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True)
class Visit:
    """One request to a page of a member's memory, with the rights it was checked for."""

    viewer: Viewer
    member: str  # whose memory, from the URL, checked against the session
    form: Mapping[str, str]  # a POST's fields, CSRF already checked; empty for GET

    @property
    def actor(self) -> str | None:
        """None when members look at their own memory; the admin otherwise (audited)."""
        return None if self.viewer.member == self.member else self.viewer.actor

    @property
    def base(self) -> str:
        return member_url(self.member)


def see_other(location: str) -> web.Response:
    """After a form: the browser loads `location` with a GET (a reload repeats nothing)."""
    return web.Response(status=303, headers={"Location": location})


def member_url(member: str) -> str:
    return f"/members/{quote(member, safe='')}"


Refusal = Callable[[web.Request, int, str, Viewer | None], Awaitable[web.StreamResponse]]
Lookup = Callable[[str | None], Awaitable[Viewer | None]]
MemberHandler = Callable[[web.Request, Visit], Awaitable[web.StreamResponse]]
ViewerHandler = Callable[[web.Request, Viewer, Mapping[str, str]], Awaitable[web.StreamResponse]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

NOT_SIGNED_IN = "You are not signed in, or your session ended. Ask the bot for a new link."
NOT_YOURS = "That page belongs to someone else's memory; you can only see your own."
ADMINS_ONLY = "That page is for the community's admins."
BROKEN = "Sorry, something went wrong on our side; nothing was changed. Please try again."
NO_SUCH_PAGE = "There is no such page here."
TOO_LARGE = "That form was larger than this site takes (1 MB), so nothing was changed."
UNREADABLE = "That request could not be read, so nothing was changed."
STALE_FORM = (
    "That form could not be checked (it is from another session, or too old). "
    "Reload the page and try again; nothing was changed."
)


def _form(request: web.Request, viewer: Viewer) -> Mapping[str, str] | None:
    """A POST's fields when its CSRF token is this session's; None when it is not."""
    if request.method != "POST":
        return {}
    form = given(request).form
    token = form.get("csrf", "")
    if not hmac.compare_digest(token.encode(), viewer.csrf.encode()):
        return None
    return form


def _said(error: web.HTTPException) -> str:
    """What a person is told for an HTTP error raised below a handler."""
    if error.status == 413:
        return TOO_LARGE
    if error.status == 404:
        return NO_SUCH_PAGE
    return UNREADABLE


class Doors:
    """Builds the guarded handlers; `refuse` renders the page that says why not."""

    def __init__(self, lookup: Lookup, refuse: Refusal) -> None:
        self.lookup = lookup
        self.refuse = refuse

    async def viewer(self, request: web.Request) -> Viewer | None:
        return await self.lookup(given(request).cookies.get(COOKIE))

    def secured(self, handler: Handler) -> Handler:
        """The input read through the boundary, safe headers on every answer; an HTTP error
        (413: a form over the size limit) is answered as itself, any other failure is logged
        and answered with a 500 page."""

        @wraps(handler)
        async def with_headers(request: web.Request) -> web.StreamResponse:
            try:
                await read(request)
                response = await handler(request)
            except web.HTTPException as error:
                if error.status < 400:  # a redirect a handler raised
                    raise
                response = await self.refuse(request, error.status, _said(error), None)
            except Exception:
                log.exception("inspector: %s %s failed", request.method, request.path)
                response = await self.refuse(request, 500, BROKEN, None)
            response.headers.update(HEADERS)
            return response

        return with_headers

    async def _admit(
        self, request: web.Request, why_not: Callable[[Viewer], str | None]
    ) -> tuple[Viewer, Mapping[str, str]] | web.StreamResponse:
        """The viewer and their form, or the refusal page: 401, 403 (not theirs, bad form)."""
        viewer = await self.viewer(request)
        if viewer is None:
            return await self.refuse(request, 401, NOT_SIGNED_IN, None)
        reason = why_not(viewer)
        if reason is not None:
            return await self.refuse(request, 403, reason, viewer)
        form = _form(request, viewer)
        if form is None:
            return await self.refuse(request, 403, STALE_FORM, viewer)
        return viewer, form

    def member_page(self, handler: MemberHandler) -> Handler:
        @wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            member = given(request).path("user")
            if member is None:  # a name no member can have (NUL, a lone surrogate)
                return await self.refuse(request, 404, NO_SUCH_PAGE, None)
            admitted = await self._admit(
                request, lambda viewer: None if viewer.may_see(member) else NOT_YOURS
            )
            if isinstance(admitted, web.StreamResponse):
                return admitted
            viewer, form = admitted
            return await handler(request, Visit(viewer, member, form))

        return self.secured(guarded)

    def signed_in(self, handler: ViewerHandler, admins_only: bool = False) -> Handler:
        """Any signed-in viewer, or (`admins_only`) an admin of the session's tenant."""

        def why_not(viewer: Viewer) -> str | None:
            return ADMINS_ONLY if admins_only and not viewer.is_admin else None

        @wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            admitted = await self._admit(request, why_not)
            if isinstance(admitted, web.StreamResponse):
                return admitted
            return await handler(request, *admitted)

        return self.secured(guarded)

    def admin_page(self, handler: ViewerHandler) -> Handler:
        return self.signed_in(handler, admins_only=True)
