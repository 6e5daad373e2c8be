"""A hostile-input campaign over the memory inspector: every route, query parameter and form
field, with what an attacker or a broken client would send.

`attempts()` draws one request: a route of the real app (read from its router, so a new
route is covered without a change here), who sends it (the member Ann, an admin, nobody),
path parts, query parameters and form fields from `hostile` (numbers past 64 bits and
negative, NUL, lone surrogates, long and very long text, wrong types, repeated fields), the
form encoded as a browser would (UTF-8), in a charset that carries anything
(`raw_unicode_escape`, which is how NUL and lone surrogates reach the server's text), or as
multipart. `Campaign.attempt` sends it and checks what a person would notice:

- no answer is a 5xx;
- a refused request (4xx) and every GET change nothing a person keeps: blocks, passages,
  messages, settings, members, sessions (the audit log may note an admin's attempt);
- a refused block edit shows the typed text back in its box;
- no page shows markup that was sent (or stored by an earlier request) unescaped.

tests/test_web_campaign.py runs it with a fixed seed in the suite; bench/web_campaign.py
runs it longer with fresh draws.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from hypothesis import strategies as st
from markupsafe import escape
from sqlalchemy import text

from bot.web.boundary import clean
from tests.inspector_site import Site

WHO = ("ann", "admin", "ann", "admin", "nobody")  # nobody: a browser with no session
DESTRUCTIVE = ("/signout", "/forget", "/reset")  # never sent with the session's form token
QUERY_NAMES = ("q", "page", "before", "saved", "deleted", "reset", "token")
FORM_NAMES = (
    "value",
    "expected",
    "page",
    "openers",
    "quiet_hours",
    "timezone",
    "token",
    "nonce",
    "welcome",
    "upkeep",
    "inactivity_hours",
    "max_unanswered",
)
ENCODINGS = ("utf-8", "raw_unicode_escape", "multipart", "no-such-charset")
SPECIALS = ["\x00", "\ud800", "\udfff", "\udc80a", "\x00\x00", "\ufeff", "\u202e", "\r\n"]
BIG = [2**63, 2**63 - 1, 2**64, -(2**63) - 1, -1, 0, 2**31, 10**30]

numbers = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(BIG)).map(str)
pieces = st.one_of(st.sampled_from(SPECIALS), st.text(max_size=12))
nasty = st.lists(pieces, max_size=6).map("".join)
long_text = st.tuples(st.integers(1_990, 4_000), st.sampled_from("x\x00é")).map(
    lambda n_c: n_c[1] * n_c[0]
)
MARKUP = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']
plain = st.sampled_from(
    ["", " ", "on", "off", "22:00-09:00", "Europe/Berlin", "1e309", "nan", *MARKUP]
)
short = st.one_of(numbers, nasty, plain)  # for URLs, which aiohttp caps at 8 kB (400 past it)
hostile = st.one_of(numbers, nasty, long_text, plain)
huge = st.just("y" * 1_100_000)  # past aiohttp's 1 MB: a 413, answered as itself


SNAPSHOT = """
SELECT
  (SELECT array_agg(concat_ws('|', external_id, timezone, settings::text) ORDER BY id) FROM users),
  (SELECT array_agg(settings::text ORDER BY id) FROM tenants),
  (SELECT array_agg(concat_ws('|', agent_id, label, value) ORDER BY agent_id, label) FROM blocks),
  (SELECT array_agg(id ORDER BY id) FROM passages),
  (SELECT count(*) FROM messages),
  (SELECT array_agg(concat_ws('|', token_hash, expires_at) ORDER BY token_hash) FROM web_sessions)
"""


@dataclass(frozen=True)
class Attempt:
    who: str
    method: str
    route: str  # the router's template, e.g. /members/{user}/blocks/{label}
    path: str  # percent-encoded
    query: list[tuple[str, str]]
    form: list[tuple[str, str]]
    encoding: str
    right_token: bool  # the form carries the session's own CSRF token


def arrives(value: str, encoding: str) -> str | None:
    """What the server reads for `value` sent in `encoding`; None: it cannot read it."""
    if encoding == "utf-8":
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    try:
        return value.encode(encoding).decode(encoding)
    except (UnicodeError, LookupError):
        return None


def _quote(value: str, encoding: str = "utf-8") -> str:
    if encoding in ("utf-8", "no-such-charset"):
        return quote(value.encode("utf-8", "surrogatepass"), safe="")
    return quote(value.encode(encoding), safe="")


@st.composite
def attempt_at(draw: Any, method: str, route: str, passages: list[int]) -> Attempt:
    """One request to `route`, from a drawn sender, with drawn hostile input."""
    who = draw(st.sampled_from(WHO))
    users = ["ann", "bob", None] if who != "admin" else ["bob", "ann", "cy", None]
    values = {
        "user": draw(st.sampled_from(users)) or draw(short),
        "label": draw(st.sampled_from(["human", "persona", None])) or draw(short),
        "passage": draw(st.sampled_from([*map(str, passages), None])) or draw(numbers | nasty),
    }
    path = route
    for name, value in values.items():
        path = path.replace("{" + name + "}", _quote(value) or "x")
    names = st.one_of(st.sampled_from(QUERY_NAMES), nasty)
    query = draw(st.lists(st.tuples(names, short), max_size=4))
    form: list[tuple[str, str]] = []
    right_token = False
    if method == "POST":
        fields = st.one_of(st.sampled_from(FORM_NAMES), nasty)
        form = draw(st.lists(st.tuples(fields, hostile), max_size=5))
        if draw(st.sampled_from([False] * 30 + [True] + [False] * 30)):
            form.append(("value", draw(huge)))
        destructive = any(route.endswith(end) for end in DESTRUCTIVE)
        right_token = not destructive and draw(st.sampled_from([True, True, True, False]))
        if not right_token:
            form.append(("csrf", draw(hostile)))
        if draw(st.booleans()):
            form.append(("csrf", draw(hostile)))  # a second, later token is never the one read
    encoding = draw(st.sampled_from(ENCODINGS))
    return Attempt(who, method, route, path, query, form, encoding, right_token)


def rounds(site_routes: list[tuple[str, str]], passages: list[int]) -> st.SearchStrategy:
    """One round: a request to every route of the app, each with its own hostile draws."""
    return st.tuples(*(attempt_at(method, route, passages) for method, route in site_routes))


@dataclass
class Campaign:
    site: Site
    sessions: Any  # the database, read for what a refused request must not change
    http: dict[str, aiohttp.ClientSession]
    csrf: dict[str, str]
    statuses: Counter[int] = field(default_factory=Counter)

    async def attempt(self, attempt: Attempt) -> None:
        before = await self.snapshot()
        status, html = await self.send(attempt)
        self.statuses[status] += 1
        assert status < 500, f"{attempt.method} {attempt.path} answered {status}"
        assert not [m for m in MARKUP if m in html], f"{attempt} shows markup unescaped"
        if status >= 400 or attempt.method == "GET":
            assert await self.snapshot() == before, f"{attempt} changed something ({status})"
        value = dict(attempt.form).get("value")
        if status == 400 and attempt.route.endswith("/blocks/{label}") and value:
            typed = arrives(value, self.charset(attempt))
            if typed is not None:
                assert str(escape(clean(typed))) in html, "a refused edit keeps the typed text"

    @staticmethod
    def charset(attempt: Attempt) -> str:
        return "raw_unicode_escape" if attempt.encoding == "multipart" else attempt.encoding

    async def send(self, attempt: Attempt) -> tuple[int, str]:
        http = self.http[attempt.who]
        query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in attempt.query)
        url = self.site.url + attempt.path + (f"?{query}" if query else "")
        form = list(attempt.form)
        if attempt.right_token:
            form.insert(0, ("csrf", self.csrf.get(attempt.who, "")))
        kwargs: dict[str, Any] = {}
        if attempt.method == "POST":
            kwargs = self.body(form, attempt.encoding)
        async with http.request(
            attempt.method, aiohttp.client.URL(url, encoded=True), allow_redirects=False, **kwargs
        ) as response:
            return response.status, await response.text(errors="replace")

    @staticmethod
    def body(form: list[tuple[str, str]], encoding: str) -> dict[str, Any]:
        if encoding == "multipart":
            data = aiohttp.FormData()
            for key, value in form:
                data.add_field(
                    re.sub(r"[^\x21-\x7e]", "_", key.replace('"', "_")),  # a header's name
                    value.encode("raw_unicode_escape"),
                    content_type="text/plain; charset=raw_unicode_escape",
                )
            return {"data": data}
        charset = "raw_unicode_escape" if encoding == "multipart" else encoding
        encoded = "&".join(f"{_quote(k, charset)}={_quote(v, charset)}" for k, v in form)
        content_type = "application/x-www-form-urlencoded"
        if charset != "utf-8":
            content_type += f"; charset={charset}"
        return {"data": encoded.encode(), "headers": {"Content-Type": content_type}}

    async def snapshot(self) -> Any:
        """What a person keeps in the tenant: a refused request must leave all of it."""
        async with self.sessions() as session:
            return (await session.execute(text(SNAPSHOT))).one()
