"""What the logs must not say, and what they need not say: filters on the one handler.

redact(text), RedactFilter     mask anything that looks like a token, key or password
withhold(text), WordsFilter    withhold what a library logs of a request at INFO and above:
                               bodies, payloads, query strings (a member's words)
NoiseFilter                    libraries' chatter an operator does not need
"""

from __future__ import annotations

import logging
import re

SECRETS = [
    (re.compile(r"\b(sk-)[A-Za-z0-9_-]{8,}"), r"\1***"),  # OpenAI-style keys
    (re.compile(r"\b(xox[abposr]-|xapp-)[A-Za-z0-9-]+"), r"\1***"),  # Slack tokens
    (  # Discord bot tokens: base64 user id . timestamp . HMAC
        re.compile(r"\b[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,}"),
        "***",
    ),
    (re.compile(r"(?i)\b(Bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"),
    (re.compile(r"(\w+://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),  # passwords in URLs
    # Values the database or its driver echo in an error (asyncpg: "invalid input for query
    # argument $1: 'what the member wrote'"; Postgres: "invalid input syntax for type
    # integer: ..."); SQLAlchemy's own listing of parameters is off (`hide_parameters`).
    (re.compile(r"(?m)(query argument \$\d+: ).*$"), r"\1[withheld]"),
    (
        re.compile(r"(?m)(invalid input (?:syntax|value) for (?:type )?[\w ]+: ).*$"),
        r"\1[withheld]",
    ),
]


def redact(text: str) -> str:
    for pattern, replacement in SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactFilter(logging.Filter):
    """Masks secrets in the message, its arguments and any traceback, before formatting."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg, record.args = redact(record.getMessage()), None
        except Exception:  # a format string that does not fit its arguments
            record.msg, record.args = redact(f"{record.msg} {record.args}"), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


# Loggers that keep members' words to DEBUG (tests/test_observability.py checks).
OURS = ("core", "bot", "adapters", "companion", "__main__")
WITHHELD = "[withheld]"
REQUEST_PARTS = [
    # slack_bolt: "Invalid request signature detected (..., body: <the request's body>)",
    # "request body: ...", "Unsuccessful Bolt execution result (status: 401, body: ...)"
    (re.compile(r"(?is)\b(body|payload|data|text)\s*[:=]\s*.*"), rf"\1: {WITHHELD}"),
    # a request or payload printed as a dict or JSON ("Unhandled request ({...})")
    (re.compile(r"(?s)[{\[].*[}\]]"), WITHHELD),
    # bytes as a library prints them (aiohttp's "bytearray(b'/path?q=...')")
    (re.compile(r"(?s)\bb(['\"]).*?\1"), WITHHELD),
    # a query string: the inspector's search words, a link's token
    (re.compile(r"\?[^\s'\")]+"), "?" + WITHHELD),
]


def withhold(text: str) -> str:
    for pattern, replacement in REQUEST_PARTS:
        text = pattern.sub(replacement, text)
    return text


def withhold_traceback(text: str) -> str:
    """A traceback's frames as they are, its exceptions' messages withheld as above."""
    lines, in_frame = [], False
    for line in text.splitlines():
        if line.startswith('  File "'):
            in_frame = True
        elif in_frame and line.startswith("    "):
            pass  # the frame's source line, and its ^^^ markers
        else:
            in_frame = False
            if not line.startswith(("Traceback (most recent call last)", "During handling")):
                line = withhold(line)
        lines.append(line)
    return "\n".join(lines)


class WordsFilter(logging.Filter):
    """Members' words never reach the log at INFO or above, whoever logs them.

    Companion's own loggers keep them to DEBUG. A library may not: slack_bolt logs a request
    with a bad signature with its whole body at INFO (a wrong or rotated
    SLACK_SIGNING_SECRET would write every DM to the log), and an unhandled one at WARNING;
    aiohttp logs a refused request line with its query. So a library's record at INFO or
    above loses every body, payload, printed request and query string, in its message and
    its traceback; at DEBUG everything stays, for whoever turns DEBUG on to look.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO or record.name.split(".")[0] in OURS:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a format string that does not fit its arguments
            message = f"{record.msg} {record.args}"
        record.msg, record.args = withhold(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = withhold_traceback(record.exc_text)
        return True


class NoiseFilter(logging.Filter):
    """Drops libraries' warnings about choices Companion makes on purpose."""

    NOISE = (
        # Bolt reads SLACK_BOT_TOKEN itself; Companion hands it a client built from it.
        ("slack_bolt", "`token` will be unused"),
        # Companion never joins a voice channel: PyNaCl and davey are not needed.
        ("discord.client", "voice will NOT be supported"),
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(
            record.name.startswith(logger) and words in str(record.msg)
            for logger, words in self.NOISE
        )
