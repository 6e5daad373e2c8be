"""What a server's refusal means, and what to do about it.

    adaptation(status, message)  a refusal Companion can work around by itself, for good:
                                 a parameter the server does not take, no system role, a
                                 template that takes no function messages
    classify(status, message)    every other failure as an error of the tree in core.errors:
                                 PromptTooLong, MalformedOutput (the server could not read
                                 the model's output: the model is told), ModelUnavailable
                                 (down, overloaded, rate-limiting: try again later),
                                 ImagesRefused (a text-only model was shown a picture),
                                 PictureRefused (it could not open that one picture),
                                 ModelSetupError (the endpoint refuses our requests as it is
                                 set up: `fix` tells the operator what to change)

Plain values in (HTTP status, the error's message and code), so real servers' wordings
are tested without a network. The wordings come from OpenAI, vLLM, Ollama and llama.cpp.
"""

from __future__ import annotations

import re
from enum import StrEnum

from core.errors import (
    ImagesRefused,
    MalformedOutput,
    ModelError,
    ModelSetupError,
    ModelUnavailable,
    PictureRefused,
    PromptTooLong,
)


class Adapt(StrEnum):
    """A change to every later request that makes the server take it."""

    NO_CACHE_KEY = "prompt_cache_key"  # strict servers refuse parameters they do not know
    COMPLETION_TOKENS = "max_completion_tokens"  # OpenAI's reasoning models refuse max_tokens
    NO_SAMPLING = "sampling"  # reasoning models take only the default temperature
    NO_SYSTEM = "system role"  # Gemma's templates (under vLLM) refuse a system message
    # Templates that know no function messages and count every message in the alternation
    # (Gemma 2's): calls and results go as words
    NO_CALLS = "function messages"


# How servers say a prompt is over their window: OpenAI's code, else its wording (OpenAI,
# vLLM: "maximum context length"; llama.cpp: "exceeds the available context size"; LM
# Studio: "context length"; others: "context window").
TOO_LONG_CODE = "context_length_exceeded"
TOO_LONG_WORDS = re.compile(
    r"context (length|window|size)|maximum context|prompt is too long|too many tokens", re.I
)
# The server's own count of the prompt: "(9000 in the messages" (vLLM, older OpenAI) or
# "your messages resulted in 9876 tokens" (OpenAI).
PROMPT_COUNT = re.compile(r"(\d[\d,]*) in the messages|resulted in (\d[\d,]*) tokens", re.I)
# llama.cpp: the model's output did not parse as a call in the template's format (HTTP 500).
MALFORMED = re.compile(
    r"does not match the expected .*? format|failed to parse tool call|"
    r"error parsing tool call|could not parse (the )?tool call|"
    r"failed to parse input at pos \d+",  # newer llama.cpp, the model's output after it
    re.I,
)
SAMPLING_REFUSED = re.compile(
    r"'?(temperature|top_p)'? .*(not supported|unsupported|does not support)", re.I
)
SYSTEM_REFUSED = re.compile(r"system (role|messages?) (is |are )?not supported", re.I)
CALLS_REFUSED = re.compile(
    r"roles must alternate|only user and assistant roles|unsupported (message )?role", re.I
)
# A text-only model's answer to a picture (OpenAI, llama.cpp without --mmproj, vLLM, Ollama).
IMAGES_REFUSED = re.compile(
    r"image_url is only supported by certain models|image input is not supported|"
    r"at most 0 image|does not support (images?|vision)|not a multimodal model|"
    r"model does not support image",
    re.I,
)
# A picture the server could not open (OpenAI, vLLM's PIL, llama.cpp): the member's picture
# is broken, whatever its first bytes said; the endpoint is fine.
PICTURE_BROKEN_CODES = {"invalid_image", "invalid_image_format", "image_parse_error"}
PICTURE_BROKEN = re.compile(
    r"unsupported image|invalid image|cannot identify image file|"
    r"failed to (load|decode|process) (the )?image",
    re.I,
)
SETUP_FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"enable-auto-tool-choice|auto.? tool choice requires", re.I),
        "vLLM: start it with --enable-auto-tool-choice and the --tool-call-parser of your "
        "model (e.g. hermes for Qwen, llama3_json for Llama 3.1, mistral for Mistral)",
    ),
    (
        re.compile(r"requires --jinja|tools param requires", re.I),
        "llama.cpp: start llama-server with --jinja and a chat template that renders tools "
        "(--chat-template-file, e.g. one from llama.cpp's models/templates)",
    ),
    (
        re.compile(r"does not support tools", re.I),
        "Ollama: this model has no tools capability; pick one whose `ollama show` lists "
        "tools (e.g. llama3.1, qwen2.5, mistral-nemo)",
    ),
    (
        re.compile(
            r"roles must alternate|raise_exception|jinja|tool call ids?|chat template", re.I
        ),
        "the server's chat template refuses Companion's prompts; use the model's own "
        "tool-use template (llama.cpp: --jinja --chat-template-file)",
    ),
    (
        re.compile(r"api.?key|unauthori[sz]ed|authentication|permission", re.I),
        "set a valid OPENAI_API_KEY for this endpoint",
    ),
    (
        re.compile(r"model .*(not found|does not exist)|no such model|unknown model", re.I),
        "check COMPANION_MODEL, and that OPENAI_BASE_URL ends where the API starts (often /v1)",
    ),
)


def adaptation(status: int | None, message: str) -> Adapt | None:
    """The change that makes the server take the request it refused, if there is one."""
    if status not in (400, 422):
        return None
    if "prompt_cache_key" in message:
        return Adapt.NO_CACHE_KEY
    if "max_tokens" in message and "max_completion_tokens" in message:
        return Adapt.COMPLETION_TOKENS
    if SAMPLING_REFUSED.search(message):
        return Adapt.NO_SAMPLING
    if SYSTEM_REFUSED.search(message):
        return Adapt.NO_SYSTEM
    if CALLS_REFUSED.search(message):
        return Adapt.NO_CALLS
    return None


def _gist(message: str) -> str:
    """A server's error in one bounded line: its first line, and its last where they differ
    (llama.cpp puts the template's own words last)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    gist = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return gist[:400]


def classify(status: int | None, message: str, code: str | None = None) -> ModelError:
    """The error a failed request is; `status` None: no answer at all (the connection)."""
    if status is None:
        return ModelUnavailable("the model endpoint could not be reached")
    short = _gist(message)
    if status in (400, 422, 500) and IMAGES_REFUSED.search(message):
        return ImagesRefused(f"the model does not take pictures (HTTP {status}: {short[:200]})")
    if status in (400, 422) and (code in PICTURE_BROKEN_CODES or PICTURE_BROKEN.search(message)):
        return PictureRefused(f"the model could not open a picture (HTTP {status}: {short[:200]})")
    if status in (400, 413, 422) and (code == TOO_LONG_CODE or TOO_LONG_WORDS.search(message)):
        found = PROMPT_COUNT.search(message)
        count = next((g for g in found.groups() if g), None) if found else None
        return PromptTooLong(
            f"the model endpoint refused the prompt as longer than its context window "
            f"(HTTP {status}: {short[:200]})",
            int(count.replace(",", "")) if count else None,
        )
    unreadable = MALFORMED.search(message)
    if unreadable:  # what follows the server's words may be the model's, the member's too
        said = _gist(message[: unreadable.end()])
        return MalformedOutput(
            f"the server could not read the model's output (HTTP {status}: {said})"
        )
    if status == 429:
        return ModelUnavailable("the model endpoint is rate-limiting us (429)")
    if status >= 500 or status == 408:
        return ModelUnavailable(f"the model endpoint answered HTTP {status}: {short}")
    fix = next((fix for pattern, fix in SETUP_FIXES if pattern.search(message)), None)
    if fix is None and status in (401, 403):
        fix = SETUP_FIXES[4][1]
    if fix is None and status == 404:
        fix = SETUP_FIXES[5][1]
    return ModelSetupError(
        f"the model endpoint refuses Companion's requests (HTTP {status}: {short})",
        fix or "check the model endpoint's settings (`companion doctor` tests it)",
    )
