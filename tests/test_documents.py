"""Uploads: what is accepted, what is refused and why, and what the agent gets."""

import json

import pytest
from sqlalchemy import select

from core.errors import UploadRejected
from core.events import EventKind, InboundEvent
from core.memory.documents import MAX_UPLOAD_BYTES, chunk_text, extract_text
from core.memory.search import archival_search
from core.memory.tokens import TokenCounter
from core.models import Passage
from tests.fake_openai import calls, last, last_user_text, say, tool_call
from tests.hostile.files import pdf, text_op
from tests.pdfs import make_pdf


def test_text_markdown_csv_json_and_pdf_are_read():
    assert extract_text("notes.md", b"# Plans\nvisit Lisbon") == "# Plans\nvisit Lisbon"
    assert extract_text("bom.txt", b"\xef\xbb\xbfhello") == "hello"
    assert extract_text("u16.txt", "héllo".encode("utf-16")) == "héllo"
    table = extract_text("pets.csv", b"name,kind\nMiso,cat\nRex,dog\n")
    assert table == "name: Miso; kind: cat\nname: Rex; kind: dog"
    data = extract_text("x.json", json.dumps({"trip": {"city": "Oslo", "days": [1, 2]}}).encode())
    assert data.splitlines() == ["trip.city: Oslo", "trip.days[0]: 1", "trip.days[1]: 2"]
    pdf = extract_text("doc.pdf", make_pdf("First page about herons", "Second page on owls"))
    assert "herons" in pdf and "owls" in pdf


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("archive.zip", b"PK\x03\x04", "I take"),
        ("photo.png", b"\x89PNG", "I take"),
        ("fake.txt", bytes(range(256)) * 20, "not UTF-8"),
        ("nul.txt", b"abc\x00def" * 100, "binary"),
        ("big.txt", b"a" * (MAX_UPLOAD_BYTES + 1), "MB"),
        ("broken.pdf", make_pdf("hello")[:120], "not a readable PDF"),
        ("notpdf.pdf", b"hello there", "not a PDF"),
        ("bad.json", b"{nope", "not valid JSON"),
        ("empty.txt", b"   \n ", "no text"),
    ],
)
def test_refusals_say_why(name, data, says):
    with pytest.raises(UploadRejected) as error:
        extract_text(name, data)
    assert says in str(error.value)


def test_a_page_of_drawing_with_a_little_text_is_read_and_a_page_of_strings_is_not():
    drawing = b"0.5 0 0 0.5 10 10 cm 0 0 m 100 100 l S\n" * 60_000  # 2.4 MB, no text
    (text,) = [extract_text("plan.pdf", pdf([drawing + text_op(b"the north bed")]))]
    assert "the north bed" in text
    shown = b"BT /F1 12 Tf " + b"<0041004200430044> Tj " * 220_000 + b"ET"  # 1.76 M bytes
    with pytest.raises(UploadRejected, match="more text than I can keep"):
        extract_text("codes.pdf", pdf([shown * 3]))


def test_chunks_respect_the_token_bound_and_keep_everything():
    text = "\n".join(f"Line {i}: " + "word " * (i % 40) for i in range(400))
    text += "\n" + "x" * 5000  # one line longer than a chunk
    chunks = chunk_text(text, max_tokens=120)
    assert all(TokenCounter.count(c) <= 121 for c in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())


async def test_upload_goes_to_archival_memory_and_the_agent_is_told(engine, fake, sessions):
    def brain(body):
        newest = last(body)
        if newest["role"] == "tool":
            return say("Here: " + newest["content"])
        if newest["content"].startswith("[system alert] [user action]"):
            return say("Thanks for the file!")
        return calls(tool_call("archival_memory_search", query=last_user_text(body)))

    fake.brain = brain
    scope = await engine.agent("t", "u")
    data = ("Packing list\n" + "\n".join(f"item {i}: spare socks" for i in range(200))).encode()
    data += b"\nThe heron lives by the old mill pond."
    exchange = await engine.upload(scope, "../../etc/trip.txt", data, dedup_key="file-1")
    assert exchange.replies == ["Thanks for the file!"]
    action = last(fake.chat_requests[-1])["content"]
    assert "trip.txt" in action and "passages" in action and "../" not in action
    again = await engine.upload(scope, "trip.txt", data, dedup_key="file-1")
    assert again.event_id == exchange.event_id and again.replies == []
    async with sessions() as session:
        sources = list(await session.scalars(select(Passage.source)))
        page = await archival_search(session, scope, "where does the heron live", None)
    assert len(sources) >= 2 and all(s.startswith("trip.txt (part ") for s in sources)
    assert "heron" in page.hits[0].text
    found = await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "heron pond"))
    assert "heron" in found.replies[0] and "trip.txt" in found.replies[0]


async def test_rejected_upload_stores_nothing(engine, fake, sessions):
    scope = await engine.agent("t", "u")
    with pytest.raises(UploadRejected):
        await engine.upload(scope, "virus.exe", b"MZ\x90\x00")
    async with sessions() as session:
        assert list(await session.scalars(select(Passage))) == []
    assert fake.requests == []
