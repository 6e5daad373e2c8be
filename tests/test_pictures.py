"""Pictures members share, through the engine: the model is shown them when it sees images
(COMPANION_VISION auto, on, off), what it says is kept in archival memory, a text-only
model's refusal is learned once and remembered across processes, and the fake refuses
image parts the way OpenAI's rules do."""

from __future__ import annotations

import base64
import json

import pytest
from sqlalchemy import select

from bot.settings import Settings
from core.config import EngineConfig
from core.errors import (
    ConfigError,
    ImagesRefused,
    ModelSetupError,
    PictureRefused,
    UploadRejected,
)
from core.events import EventKind, InboundEvent
from core.models import Meta, Passage
from core.runtime.pictures import NO_PICTURES, Pictures, Vision, picture_kind
from core.wire.refusals import classify
from tests.fake_openai import png
from tests.test_cost import Recorded
from tests.wire_rules import openai_refusal

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 20
GIF = b"GIF89a" + b"\x00" * 20
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 20


def test_pictures_are_known_by_their_bytes_not_their_names():
    assert picture_kind("a.png", png()) == "image/png"
    assert picture_kind("a.png", JPEG) == "image/jpeg"
    assert picture_kind("x", GIF) == "image/gif"
    assert picture_kind("x", WEBP) == "image/webp"
    with pytest.raises(UploadRejected, match="cat.png is not a PNG, JPEG, WebP or GIF"):
        picture_kind("cat.png", b"MZ\x90\x00 not a picture")


@pytest.mark.parametrize(
    "status, message",
    [
        (400, "Invalid content type. image_url is only supported by certain models."),
        (
            500,
            "image input is not supported - hint: if this is unexpected, you may need to "
            "provide the mmproj",
        ),
        (400, "At most 0 image(s) may be provided in one request."),
        (400, "registry.ollama.ai/library/llama3.1:latest does not support images"),
    ],
)
def test_text_only_servers_refusals_of_pictures_are_known(status, message):
    assert isinstance(classify(status, message), ImagesRefused)


def test_other_refusals_stay_setup_errors():
    assert isinstance(classify(400, "Unknown parameter: 'foo'"), ModelSetupError)


def image_request(url: str, detail: str = "low") -> dict:
    part = {"type": "image_url", "image_url": {"url": url, "detail": detail}}
    content = [{"type": "text", "text": "look"}, part]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def test_the_fake_refuses_image_parts_openai_refuses():
    good = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert openai_refusal(image_request(good)) is None
    assert openai_refusal(image_request("https://example.org/a.png", "auto")) is None
    refused = openai_refusal(image_request(good, "medium"))
    assert refused["param"] == "messages[0].content[1].image_url.detail"
    liar = "data:image/png;base64," + base64.b64encode(JPEG).decode()
    assert openai_refusal(image_request(liar))["code"] == "invalid_image_format"
    assert openai_refusal(image_request("ftp://example.org/a.png"))["code"] == "invalid_image_url"
    bmp = "data:image/bmp;base64," + base64.b64encode(b"BM....").decode()
    assert openai_refusal(image_request(bmp))["code"] == "invalid_image_format"
    in_reply = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": good}}]},
        ],
    }
    assert "Supported values are: ('text',)" in openai_refusal(in_reply)["message"]


def test_companion_vision_is_auto_on_or_off():
    assert Settings.from_env({}).vision == "auto"
    assert Settings.from_env({"COMPANION_VISION": "OFF"}).vision == "off"
    with pytest.raises(ConfigError, match="COMPANION_VISION must be auto, on or off"):
        Settings.from_env({"COMPANION_VISION": "maybe"})


async def test_auto_learns_a_refusal_once_and_remembers_it_in_the_database(
    engine, fake, sessions, clock
):
    fake.vision = False
    key = engine.pictures.vision.key
    scope = await engine.agent("t", "ana")
    seen = await engine.pictures.see(scope, "a.png", png(1), "k1", 0)
    assert seen.notice == NO_PICTURES.format(name="a.png") and "cannot see" in seen.note
    async with sessions() as session:
        assert await session.scalar(select(Meta.value).where(Meta.key == key)) == "no"
    # A new process (a new Pictures) asks the database, not the model.
    again = Pictures(sessions, engine.mind, clock, engine.pictures.vision)
    bob = await engine.agent("t", "bob")
    told = await again.see(bob, "b.png", png(2), "k2", 0)
    assert told.notice is not None  # bob hears it once too
    assert len([r for r in fake.requests if not r.get("tools")]) == 1
    # `on` tries anyway, and does not overwrite what auto learned.
    fake.vision = True
    fake.pictures[png(3)] = "A red kite over a beach."
    forced = Pictures(sessions, engine.mind, clock, Vision("on", engine.pictures.vision.model))
    assert "red kite" in (await forced.see(scope, "c.png", png(3), "k3", 0)).note
    async with sessions() as session:
        assert await session.scalar(select(Meta.value).where(Meta.key == key)) == "no"
        kept = await session.scalar(select(Passage.text).where(Passage.agent_id == scope.agent_id))
    assert kept is not None and "red kite" in kept


async def test_off_never_shows_the_model_a_picture(make_engine_for, fake, clock):
    engine = make_engine_for()
    pictures = Pictures(engine.sessions, engine.mind, clock, Vision("off", "fake"))
    scope = await engine.agent("t", "ana")
    first = await pictures.see(scope, "a.png", png(), "k1", 0)
    second = await pictures.see(scope, "b.png", png(2), "k2", 0)
    assert first.notice is not None and second.notice is None  # told once
    assert fake.requests == []


async def test_a_picture_costs_the_member_its_tokens(engine, fake, members):
    fake.pictures[png()] = "A cat."
    metrics = engine.mind.metrics = Recorded()
    scope = await engine.agent("t", "ana")
    await engine.pictures.see(scope, "a.png", png(), "k1", 0)
    days = await members.usage(engine.clock().date(), "t")
    assert [d.calls for d in days] == [1] and days[0].spent.tokens > 85
    # The operator's counters see the call too (README: they count every model call).
    counted = metrics.counts["prompt_tokens_total"] + metrics.counts["completion_tokens_total"]
    assert counted == days[0].spent.tokens


async def test_a_description_with_nul_or_a_lone_surrogate_is_kept_cleaned(engine, fake, sessions):
    fake.pictures[png()] = "A cat\x00 on a \ud800 mat."
    scope = await engine.agent("t", "ana")

    await engine.pictures.see(scope, "a.png", png(), "k1", 0)

    async with sessions() as session:
        texts = list(await session.scalars(select(Passage.text)))
    assert len(texts) == 1 and "A cat\ufffd on a \ufffd mat." in texts[0]


async def test_a_spent_budget_is_not_spent_further_on_pictures(make_engine_for, fake, members):
    engine = make_engine_for(EngineConfig(member_daily_tokens=50))
    fake.pictures[png()] = "A cat."
    scope = await engine.agent("t", "ana")
    await engine.converse(scope, InboundEvent(EventKind.USER_MESSAGE, "hello"))  # > 50 tokens
    seen = await engine.pictures.see(scope, "a.png", png(), "k1", 0)
    assert "budget" in seen.note and seen.notice is None
    assert [r for r in fake.requests if not r.get("tools")] == []


OPENAI_BROKEN_PICTURE = (
    "You uploaded an unsupported image. Please make sure your image is below 20 MB in size "
    "and is of one the following formats: ['png', 'jpeg', 'gif', 'webp']."
)


@pytest.mark.parametrize(
    "status, message",
    [
        (400, OPENAI_BROKEN_PICTURE),
        (400, "You uploaded an unsupported image. Please make sure your image is valid."),
        (400, "cannot identify image file <_io.BytesIO object at 0x7f>"),  # vLLM (PIL)
        (400, "failed to load image or audio file"),  # llama.cpp
    ],
)
def test_a_picture_the_server_cannot_open_is_the_pictures_fault(status, message):
    refused = classify(status, message, "invalid_image_format")
    assert isinstance(refused, PictureRefused) and not isinstance(refused, ModelSetupError)


async def test_a_broken_picture_is_refused_to_its_member_not_a_setup_error(engine, fake):
    """A truncated PNG (its first bytes right) reaches the model, which cannot open it: the
    member hears their picture could not be opened; the endpoint is not misconfigured."""
    error = {"message": OPENAI_BROKEN_PICTURE, "type": "invalid_request_error"}
    fake.fail_next(400, json.dumps({"error": {**error, "code": "invalid_image_format"}}))
    scope = await engine.agent("t", "ana")
    with pytest.raises(UploadRejected, match="I could not open broken.png as a picture"):
        await engine.pictures.see(scope, "broken.png", png()[:40], "k1", 0)
    assert engine.mind.health.state()[0] == "ok"
    fake.pictures[png()] = "A cat."
    assert "A cat." in (await engine.pictures.see(scope, "a.png", png(), "k2", 0)).note
