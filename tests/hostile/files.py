"""Hostile files, built in code: PDFs with bombs and lies, archives, odd encodings."""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib

from tests.pdfs import make_pdf


def pdf(contents: list[bytes], count: int | None = None, flate: bool = True) -> bytes:
    """A PDF with one page per content stream; `count` is what /Pages claims (a lie if set)."""
    pages = len(contents)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(pages)), count or pages),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, content in enumerate(contents):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        data = zlib.compress(content, 9) if flate else content
        head = b"<< /Length %d%s >>" % (len(data), b" /Filter /FlateDecode" if flate else b"")
        objects.append(head + b"\nstream\n" + data + b"\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def text_op(text: bytes) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (" + text + b") Tj ET"


def deflate_bomb_pdf(megabytes: int = 300) -> bytes:
    """A few hundred KB that inflate to `megabytes` of blanks in one content stream."""
    return pdf([b" " * (megabytes * 1_000_000)])


def text_bomb_pdf(megabytes: float = 30) -> bytes:
    """Tens of KB that inflate to one huge string shown on a single page."""
    return pdf([text_op(b"A" * int(megabytes * 1_000_000))])


def lying_page_count_pdf() -> bytes:
    return pdf([text_op(b"one real page about herons")], count=100_000, flate=False)


def many_pages_pdf(pages: int) -> bytes:
    return make_pdf(*[f"page {i}" for i in range(pages)])


def page_loop_pdf() -> bytes:
    return make_pdf("hello").replace(b"/Kids [4 0 R]", b"/Kids [2 0 R]")


def no_text_pdf() -> bytes:
    return pdf([b"0 0 m 100 100 l S"])


def encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(make_pdf("a secret about herons"))))
    writer.encrypt("hunter2", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def zip_bomb(megabytes: int = 50) -> bytes:
    """A zip archive whose one member inflates to `megabytes` of zeros."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.txt", b"\0" * (megabytes * 1_000_000))
    return out.getvalue()


def gzip_bomb(megabytes: int = 50) -> bytes:
    return gzip.compress(b"\0" * (megabytes * 1_000_000), compresslevel=9)


def small_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "hello from inside a zip")
    return out.getvalue()


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64)
EXE = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(200)
DEEP_LIST = b"[" * 10_000 + b"]" * 10_000  # JSON nested 10,000 levels deep
DEEP_DICT = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
