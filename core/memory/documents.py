"""Uploaded files into archival memory: check, extract text, chunk by tokens, store.

    extract_text(filename, data)   text of a .txt/.md/.csv/.json/.pdf file, or UploadRejected
    chunk_text(text, max_tokens)   pieces of about `max_tokens`, cut at paragraph or line ends
    store_document(...)            embed and insert the pieces as passages (source = file name)

Limits are part of the contract: a file over `MAX_UPLOAD_BYTES`, of another type, binary
posing as text, a broken or encrypted PDF, or one that expands to more than
`MAX_EXTRACTED_CHARS` of text is refused with a sentence that says why.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from datetime import datetime
from pathlib import PurePath
from typing import Any

from core.errors import UploadRejected
from core.events import clean_text
from core.memory.store import AgentStore
from core.memory.tokens import TokenCounter, split_tokens
from core.ports import Embedder

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_EXTRACTED_CHARS = 2_000_000
MAX_PDF_PAGES = 500
KINDS = {
    ".txt": "text",
    ".md": "text",
    ".markdown": "text",
    ".csv": "csv",
    ".json": "json",
    ".pdf": "pdf",
}


def _decode(data: bytes, name: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise UploadRejected(f"{name} is not UTF-8 text; is it really a text file?") from None
    controls = sum(1 for c in text[:10000] if c < " " and c not in "\n\r\t\f")
    if "\x00" in text or controls > len(text[:10000]) // 100 + 2:
        raise UploadRejected(f"{name} looks like binary data, not text")
    return text


def _csv_text(text: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    header, body = rows[0], rows[1:]
    lines = []
    for row in body:
        pairs = [f"{h}: {v}" for h, v in zip(header, row, strict=False) if v.strip()]
        lines.append("; ".join(pairs))
    return "\n".join(lines) if body else ", ".join(header)


def _json_lines(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [
            line
            for k, v in value.items()
            for line in _json_lines(v, f"{path}.{k}" if path else str(k))
        ]
    if isinstance(value, list):
        return [line for i, v in enumerate(value) for line in _json_lines(v, f"{path}[{i}]")]
    return [f"{path}: {value}" if path else str(value)]


# A string operand of a content stream: a literal "(...)" (escapes allowed; the innermost of
# nested parentheses) or a hex string "<...>" (two digits a byte).
_LITERAL = re.compile(rb"\([^()\\]*(?:\\.[^()\\]*)*\)", re.DOTALL)
_HEX = re.compile(rb"<[0-9A-Fa-f\s]*>")


def _string_bytes(page: Any) -> int:
    """The bytes of the strings a page's content streams hold, found without parsing them.

    Every character a page shows comes from these bytes, one or two of them a character with
    the fonts of ordinary documents, so a page holding more than twice the characters still
    allowed is refused before pypdf parses it: its parser reads a string a character at a
    time, so a few KB that inflate to one huge string would otherwise cost seconds of CPU
    (pypdf caps the inflating itself)."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    contents = contents.get_object()
    streams = contents if isinstance(contents, list) else [contents]
    total = 0
    for stream in streams:
        data = stream.get_object().get_data()
        total += sum(len(m) for m in _LITERAL.findall(data))
        total += sum(len(m) // 2 for m in _HEX.findall(data))
    return total


def _pdf_error() -> type[Exception]:
    """pypdf's error class, imported with pypdf itself: only when a PDF is read."""
    from pypdf.errors import PyPdfError

    return PyPdfError


def _pdf_text(data: bytes, name: str) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UploadRejected(f"{name} is encrypted; send an unlocked copy")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise UploadRejected(
                f"{name} has {len(reader.pages)} pages; the most is {MAX_PDF_PAGES}"
            )
        pages, size = [], 0
        for page in reader.pages:
            if _string_bytes(page) > 2 * (MAX_EXTRACTED_CHARS - size):
                raise UploadRejected(f"{name} holds more text than I can keep at once")
            text = page.extract_text() or ""
            size += len(text)
            if size > MAX_EXTRACTED_CHARS:
                raise UploadRejected(f"{name} holds more text than I can keep at once")
            pages.append(text)
    except UploadRejected:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as error:
        raise UploadRejected(f"{name} is not a readable PDF ({type(error).__name__})") from None
    return "\n\n".join(pages)


def check_upload(filename: str, size: int) -> str:
    """The file's kind, from its name and size alone (before anyone downloads it)."""
    name = PurePath(filename).name or "the file"
    kind = KINDS.get(PurePath(name).suffix.lower())
    if kind is None:
        allowed = ", ".join(sorted(KINDS))
        raise UploadRejected(
            f"I can't read {name}: I take {allowed} files (and PNG, JPEG, WebP and GIF pictures)"
        )
    if size > MAX_UPLOAD_BYTES:
        most = MAX_UPLOAD_BYTES // 1_000_000
        raise UploadRejected(f"{name} is {size / 1e6:.1f} MB; the most I take is {most} MB")
    return kind


def upload_name(filename: str) -> str:
    """A file's own name, whatever path or odd characters it came with."""
    name = PurePath(clean_text(filename).replace("\\", "/")).name
    name = "".join(c for c in name if c.isprintable())
    if len(name) > 200:
        suffix = PurePath(name).suffix[:20]
        name = name[: 200 - len(suffix)] + suffix
    return name or "the file"


def extract_text(filename: str, data: bytes) -> str:
    name = upload_name(filename)
    kind = check_upload(name, len(data))
    try:
        text = _extract(kind, data, name)
    except UploadRejected:
        raise
    except (RecursionError, ValueError, csv.Error, UnicodeError, MemoryError, _pdf_error()):
        raise UploadRejected(f"{name} is damaged or too complex for me to read") from None
    text = clean_text(text).strip()
    if len(text) > MAX_EXTRACTED_CHARS:
        raise UploadRejected(f"{name} holds more text than I can keep at once")
    if not text:
        raise UploadRejected(f"{name} has no text I could read")
    return text


def _extract(kind: str, data: bytes, name: str) -> str:
    if kind == "pdf":
        if not data.startswith(b"%PDF"):
            raise UploadRejected(f"{name} is not a PDF")
        return _pdf_text(data, name)
    text = _decode(data, name)
    if kind == "csv":
        return _csv_text(text)
    if kind == "json":
        try:
            return "\n".join(_json_lines(json.loads(text)))
        except json.JSONDecodeError as error:
            raise UploadRejected(f"{name} is not valid JSON (line {error.lineno})") from None
    return text


def chunk_text(text: str, max_tokens: int = 300) -> list[str]:
    """Pieces of at most `max_tokens` tokens, cut at paragraph or line ends where possible."""
    count = TokenCounter.count
    chunks: list[str] = []
    current: list[str] = []
    used = 0

    def close() -> None:
        nonlocal current, used
        if current:
            chunks.append("\n".join(current).strip())
        current, used = [], 0

    for line in text.splitlines():
        n = count(line) + 1
        if n > max_tokens:  # a line longer than a chunk: cut it by tokens, encoding it once
            close()
            chunks.extend(piece.strip() for piece in split_tokens(line, max_tokens))
            continue
        if used + n > max_tokens:
            close()
        current.append(line)
        used += n
    close()
    return [c for c in chunks if c]


async def store_document(
    store: AgentStore,
    name: str,
    chunks: list[str],
    now: datetime,
    embedder: Embedder | None = None,
    event_id: int | None = None,
    batch: int = 64,
) -> int:
    """Insert the chunks as passages with their source (and the event of the shared file
    they came with); returns how many."""
    for start in range(0, len(chunks), batch):
        part = chunks[start : start + batch]
        vectors: list[Any] = await embedder.embed(part) if embedder else [None] * len(part)
        for i, (text, vector) in enumerate(zip(part, vectors, strict=True)):
            source = f"{name} (part {start + i + 1} of {len(chunks)})"
            await store.add_passage(text, now, source, vector, event_id)
    return len(chunks)
