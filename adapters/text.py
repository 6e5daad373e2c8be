"""Reply text for platforms: split at a length limit, keep code blocks whole and valid.

`split_message(text, limit)` packs paragraphs, lines and words into parts of at most `limit`
characters. A fenced code block goes whole into one part when it can; one longer than a
part is cut between lines, and each piece is closed and reopened with the same fence and
language, so every part renders as valid markdown. Words are never cut, unless a single
word is longer than a part.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n`]*)$", re.MULTILINE)


def _segments(text: str) -> list[tuple[str, str | None]]:
    """(text, fence header or None) pieces: prose, and fenced code blocks with their fences."""
    segments: list[tuple[str, str | None]] = []
    pos = 0
    while True:
        start = FENCE.search(text, pos)
        if start is None:
            break
        fence = start.group(1)
        header = start.group(0).strip()
        end = re.compile(rf"^ {{0,3}}{re.escape(fence)}[{fence[0]}]*[ \t]*$", re.MULTILINE).search(
            text, start.end()
        )
        if end is None:  # an unclosed fence runs to the end: close it ourselves
            segments += [(text[pos : start.start()], None)]
            body = text[start.end() :].strip("\n")
            segments.append((f"{header}\n{body}\n{fence}", header))
            return [s for s in segments if s[0]]
        segments.append((text[pos : start.start()], None))
        segments.append((text[start.start() : end.end()], header))
        pos = end.end()
    segments.append((text[pos:], None))
    return [s for s in segments if s[0]]


def _cut_prose(text: str, room: int) -> int:
    """Where to cut prose to fit `room`: a paragraph, line, sentence or word boundary."""
    window = text[: room + 1]
    for pattern in ("\n\n", "\n", ". ", " "):
        at = window.rfind(pattern, 0, room + 1)
        if at > 0:
            return at + (len(pattern) if pattern == ". " else 0)
    return room  # one word longer than the room: a hard cut is the only way


def _code_pieces(block: str, header: str, limit: int) -> list[str]:
    fence = re.match(r"`{3,}|~{3,}", header)
    close = fence.group(0) if fence else "```"
    lines = block.split("\n")[1:-1]
    room = limit - len(header) - len(close) - 2
    pieces, current = [], ""
    for line in lines:
        while len(line) > room:  # a line longer than a whole part
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:room])
            line = line[room:]
        candidate = f"{current}\n{line}" if current else line
        if current and len(candidate) > room:
            pieces.append(current)
            candidate = line
        current = candidate
    if current or not pieces:
        pieces.append(current)
    return [f"{header}\n{piece}\n{close}" for piece in pieces]


def split_message(text: str, limit: int) -> list[str]:
    if limit < 20:
        raise ValueError("limit too small to split into readable parts")
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    current = ""

    def flush() -> None:
        nonlocal current
        if current.strip():
            parts.append(current.strip())
        current = ""

    for segment, header in _segments(text):
        if header is not None and len(header) > limit // 4:
            header = None  # a fence line that long cannot be repeated on every part: prose
        if header is not None:
            if len(current) + len(segment) <= limit:
                current += segment
                continue
            flush()
            if len(segment) <= limit:
                current = segment
            else:
                pieces = _code_pieces(segment, header, limit)
                parts.extend(pieces[:-1])
                current = pieces[-1]
            continue
        rest = segment
        while rest:
            room = limit - len(current)
            if len(rest) <= room:
                current += rest
                break
            if room < limit // 4 and current.strip():
                flush()
                continue
            cut = _cut_prose(rest, room)
            current += rest[:cut]
            rest = rest[cut:].lstrip(" ")
            flush()
    flush()
    return parts


# Inline markdown, leftmost first; at one place the first alternative wins. Emphasis needs
# text against its markers and no letter outside them (5*3*2 and snake_case stay as they are).
# What emphasis holds (`_HELD`) takes code spans whole: it never ends inside one, so a
# marker in code (`*`) cannot close an emphasis begun outside it.
_CODE = r"``[^\n]+?``|`[^`\n]+`"
_HELD = rf"(?:{_CODE}|`(?![^`\n]*`)|[^`\n])+?"
_INLINE = re.compile(
    rf"(?P<code>{_CODE})"
    r"|!?\[(?P<label>[^\]\n]+)\]\((?P<url>(?:https?://|mailto:)[^)\s]+)\)"
    rf"|(?<!\*)\*\*(?=\S)(?P<bold>{_HELD})(?<=\S)\*\*(?!\*)"
    rf"|(?<!\w)__(?=\S)(?P<bold_>{_HELD})(?<=\S)__(?!\w)"
    rf"|~~(?=\S)(?P<strike>{_HELD})(?<=\S)~~"
    rf"|(?<![\w*])\*(?=[^\s*])(?P<em>{_HELD})(?<=[^\s*])\*(?![\w*])"
    rf"|(?<!\w)_(?=[^\s_])(?P<em_>{_HELD})(?<=[^\s_])_(?!\w)"
)
_HEADING = re.compile(r" {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*")
_BULLET = re.compile(r"^([ \t]*)[*+][ \t]+(?=\S)")


def _inline(text: str) -> str:
    return _INLINE.sub(_to_mrkdwn, text)


def _to_mrkdwn(match: re.Match[str]) -> str:
    if match["code"]:
        return match["code"]
    if match["url"]:
        return f"<{match['url']}|{_inline(match['label'])}>"
    if match["bold"] or match["bold_"]:
        return f"*{_inline(match['bold'] or match['bold_'])}*"
    if match["strike"]:
        return f"~{_inline(match['strike'])}~"
    return f"_{_inline(match['em'] or match['em_'])}_"


def _line(line: str) -> str:
    heading = _HEADING.fullmatch(line)
    if heading:  # bold as a whole: bold inside would close it early
        return "*" + _inline(heading[1].replace("**", "").replace("__", "")) + "*"
    return _inline(_BULLET.sub(r"\1• ", line, count=1))


def to_slack_mrkdwn(text: str) -> str:
    """Common markdown to Slack's mrkdwn, leaving code blocks and code spans alone.

    **bold** and __bold__ become *bold*, *italic* and _italic_ become _italic_, ~~struck~~
    becomes ~struck~, a link or image [label](https://...) becomes <https://...|label>, a
    heading a bold line and a `*` bullet a `•` (Slack would read a lone `*` as the start of bold).
    """
    out = []
    for segment, header in _segments(text) or [(text, None)]:
        out.append(segment if header else "\n".join(map(_line, segment.split("\n"))))
    return "".join(out)
