"""The memory inspector: members see and correct their memory in a browser, admins look
after their community. Server-rendered HTML (Jinja2) on aiohttp; reading needs no JavaScript.

    boundary.py  every request's input, read once: NUL and lone surrogates out, numbers bounded
    auth.py      who is signed in, whose pages they may open, CSRF on every form
    member.py    one member's memory: blocks, conversation, passages, settings, export, erase
    admin.py     the community: members, usage, settings, audit log
    render.py    templates, filters, tabs, the usage chart
    templates/, static/inspector.css

    GET  /                 your pages when signed in, else how to get a link
    GET  /signin?token=    what the link opens, and a Continue button: a link preview that
                           fetches the URL does not use up the link
    POST /signin           the link, once, for a session cookie (HttpOnly, SameSite=Lax);
                           only from that page (a nonce in its form and a SameSite=Strict
                           cookie), so another site cannot sign a browser in as someone else
    POST /signout

`add_inspector(app, inspector)` puts it all on an aiohttp app: `companion web`'s own, or the
one `companion run` serves health checks (and Slack's HTTP mode) on.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.web.admin import AdminPages
from bot.web.auth import COOKIE, Doors, member_url, see_other
from bot.web.boundary import given
from bot.web.member import MemberPages
from bot.web.render import Templates
from core.errors import LinkRefused
from core.members.community import Community
from core.members.service import Members
from core.tenants.access import SESSION_TTL, SIGN_IN_PATH, Access, Viewer

STYLESHEET = Path(__file__).parent / "static" / "inspector.css"
SIGN_IN_NONCE = "companion_signin"
FOREIGN_SIGN_IN = (
    "This sign-in did not come from the link's own page, so it was not used. "
    "Open the link again and press Continue."
)
ASK_AGAIN = (
    "Ask the bot for a new link: /memory web on Discord or /companion web on Slack "
    "(admins: /admin web, /companion admin web)."
)


@dataclass(frozen=True)
class Inspector:
    members: Members
    community: Community
    access: Access
    secure_cookies: bool = False  # set when the public URL is https


class _Front:
    """The pages outside anyone's memory: the landing page, signing in and out."""

    def __init__(self, inspector: Inspector, templates: Templates) -> None:
        self.inspector = inspector
        self.templates = templates
        self.css = STYLESHEET.read_bytes()

    async def refuse(
        self, request: web.Request, status: int, message: str, viewer: Viewer | None
    ) -> web.StreamResponse:
        title = {
            400: "Could not read that",
            401: "Please sign in",
            403: "Not allowed",
            404: "Not found",
            413: "Too large",
            500: "Something went wrong",
        }
        return self.templates.page(
            "message.html",
            status,
            title=title.get(status, "Not allowed"),
            viewer=viewer,
            message=message,
            hint=ASK_AGAIN if status == 401 else None,
            back="/" if viewer else None,
            back_label="Back to your pages",
        )

    async def landing(self, request: web.Request) -> web.StreamResponse:
        viewer = await self.inspector.access.viewer(given(request).cookies.get(COOKIE))
        if viewer is not None:
            return see_other("/admin" if viewer.is_admin else member_url(viewer.member or ""))
        minutes = int(self.inspector.access.link_ttl.total_seconds() // 60)
        return self.templates.page("landing.html", title="Your companion's memory", minutes=minutes)

    def _link_refused(self, error: LinkRefused) -> web.Response:
        return self.templates.page(
            "message.html",
            403 if error.reason == "bad" else 410,
            title="This link does not work",
            message=str(error).replace(" Ask for a new one.", ""),
            hint=ASK_AGAIN,
            back=None,
        )

    async def signin_page(self, request: web.Request) -> web.StreamResponse:
        token = given(request).query.get("token", "")
        try:
            grant = await self.inspector.access.check(token)
        except LinkRefused as error:
            return self._link_refused(error)
        nonce = secrets.token_urlsafe(16)
        page = self.templates.page(
            "signin.html", title="Sign in", grant=grant, token=token, nonce=nonce
        )
        page.set_cookie(
            SIGN_IN_NONCE,
            nonce,
            max_age=int(self.inspector.access.link_ttl.total_seconds()),
            path=SIGN_IN_PATH,
            httponly=True,
            samesite="Strict",
            secure=self.inspector.secure_cookies or request.secure,
        )
        return page

    async def signin(self, request: web.Request) -> web.StreamResponse:
        form = given(request).form
        token, nonce = str(form.get("token", "")), str(form.get("nonce", ""))
        expected = given(request).cookies.get(SIGN_IN_NONCE, "")
        if not expected or not hmac.compare_digest(nonce.encode(), expected.encode()):
            return self.templates.page(
                "message.html", 403, title="Not signed in", message=FOREIGN_SIGN_IN, back=None
            )
        try:
            cookie, viewer = await self.inspector.access.redeem(token)
        except LinkRefused as error:
            return self._link_refused(error)
        response = see_other("/admin" if viewer.is_admin else member_url(viewer.member or ""))
        ttl = SESSION_TTL["admin" if viewer.is_admin else "member"]
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=int(ttl.total_seconds()),
            path="/",
            httponly=True,
            samesite="Lax",
            secure=self.inspector.secure_cookies or request.secure,
        )
        response.del_cookie(SIGN_IN_NONCE, path=SIGN_IN_PATH)
        return response

    async def signout(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        await self.inspector.access.sign_out(given(request).cookies.get(COOKIE, ""))
        response = self.templates.page(
            "message.html",
            title="Signed out",
            message="You are signed out.",
            hint="To come back, ask the bot for a new link.",
            back=None,
        )
        response.del_cookie(COOKIE, path="/")
        return response

    async def stylesheet(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self.css,
            content_type="text/css",
            headers={"Cache-Control": "public, max-age=3600"},
        )


def add_inspector(app: web.Application, inspector: Inspector) -> web.Application:
    templates = Templates()
    front = _Front(inspector, templates)
    doors = Doors(inspector.access.viewer, front.refuse)
    members = MemberPages(inspector.members, inspector.access, templates)
    admins = AdminPages(inspector.community, inspector.members, templates)
    app.add_routes(
        [
            web.get("/", doors.secured(front.landing)),
            web.get(SIGN_IN_PATH, doors.secured(front.signin_page)),
            web.post(SIGN_IN_PATH, doors.secured(front.signin)),
            web.post("/signout", doors.signed_in(front.signout)),
            web.get("/inspector.css", front.stylesheet),
            *members.routes(doors.member_page),
            *admins.routes(doors.admin_page),
        ]
    )
    return app
