"""The `openai` package, imported without its aiohttp transport.

openai imports `openai._vendor.httpx_aiohttp` (its `DefaultAioHttpClient`) whenever aiohttp
is installed, as it is here for the servers: a tenth of a second or more of a chat's first
turn and of every doctor, for a transport Companion never uses (its clients speak httpx).
Without that module openai defines a stand-in, which says so if it is ever asked for.
Import `openai` from here: `from core.openai_package import openai`.
"""

from __future__ import annotations

import sys

sys.modules.setdefault("openai._vendor.httpx_aiohttp", None)  # type: ignore[arg-type]

import openai  # noqa: E402

__all__ = ["openai"]
