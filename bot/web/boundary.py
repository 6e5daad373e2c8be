"""The inspector's one input boundary: everything a request carries, read once and made safe.

    read(request) -> Input     the query, the form, the path's parts and the cookies, each
                               a plain str
    given(request) -> Input    what `read` found, for a handler (`Doors.secured` reads it)
    Input.number(...)          a whole number within bounds, else the default
    clean(text)                the text without what Postgres cannot store

No handler reads `request.query`, `request.post()` or `request.match_info` itself
(tests/test_web_campaign.py checks the source): a value reaches the services only through
here. What comes through:

- text without NUL and without lone surrogates (Postgres stores neither; the rest of what
  was typed is kept, so a block edit saves what the person wrote);
- the first of duplicated fields, and no uploaded files (no form here takes one);
- numbers only as digits within their bounds (a page, a message or passage id): past
  64 bits, negative or not a number is the default, never an error from the database;
- a path part holding NUL or a lone surrogate names nothing: `path` is None for it, and
  the page answers 404;
- a cookie holding one (bytes that are not UTF-8 arrive as lone surrogates) is not there:
  no session, no sign-in nonce.

An HTTP error raised while reading (aiohttp's 413 for a body over `client_max_size`, 400
for a malformed one) passes through as itself: `Doors.secured` answers it with its status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
DIGITS = re.compile(r"[0-9]{1,19}")
BIGINT = 2**63 - 1  # the largest id Postgres's bigint holds
PAGES = 2**31 - 1  # the largest page number anyone is shown
_KEY = web.RequestKey("companion_input", object)


def clean(text: str) -> str:
    """`text` without NUL and lone surrogates, which no Postgres text column can hold."""
    return UNSTORABLE.sub("", text)


def _fields(items: Iterable[tuple[str, object]]) -> dict[str, str]:
    """The first value of each text field, cleaned; files and repeats are dropped."""
    fields: dict[str, str] = {}
    for key, value in items:
        if isinstance(value, str):
            fields.setdefault(clean(key), clean(value))
    return fields


@dataclass(frozen=True)
class Input:
    query: Mapping[str, str]
    form: Mapping[str, str]  # a POST's text fields; empty for other methods
    parts: Mapping[str, str | None]  # the path's parts; None when one cannot be stored
    cookies: Mapping[str, str] = field(default_factory=dict)  # those that are plain text

    def path(self, name: str) -> str | None:
        return self.parts.get(name)

    def number(self, value: str | None, default: int, low: int = 1, high: int = PAGES) -> int:
        """`value` as a whole number from `low` to `high`; `default` when it is not one."""
        if value is None or not DIGITS.fullmatch(value.strip()):
            return default
        number = int(value.strip())
        return number if low <= number <= high else default


async def read(request: web.Request) -> Input:
    """The request's input, cleaned; raises aiohttp's HTTP errors (413, 400) as they are."""
    form: dict[str, str] = {}
    if request.method == "POST":
        try:
            body = await request.post()
        except (ValueError, LookupError, RuntimeError) as error:  # undecodable; unknown charset
            raise web.HTTPBadRequest(reason="unreadable form") from error
        form = _fields(body.items())
    parts = {
        key: None if UNSTORABLE.search(value) else value
        for key, value in request.match_info.items()
    }
    cookies = {
        key: value for key, value in request.cookies.items() if not UNSTORABLE.search(key + value)
    }
    found = Input(_fields(request.query.items()), form, parts, cookies)
    request[_KEY] = found
    return found


def given(request: web.Request) -> Input:
    """The input `read` found for this request (every inspector handler runs after it)."""
    found = request.get(_KEY)
    assert isinstance(found, Input), "read(request) runs before any handler"
    return found
