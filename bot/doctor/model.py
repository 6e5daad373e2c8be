"""The model checks: a one-token completion; that the endpoint really calls functions; the
endpoint's embedding model and its size (the local one is `bot.doctor.embedder`'s).

The functions check asks the same tiny question twice, without and with one function: a
server whose template renders no tools (llama.cpp without --jinja or with such a template)
counts the same prompt both times, whatever it answers. A refusal names its fix (vLLM's
tool-choice flags, an Ollama model without tools), and a model that answers in text where
it should call says so.
"""

from __future__ import annotations

from bot.doctor.results import TIMEOUT, Result, fail, ok, warn
from bot.doctor.results import why as _why
from bot.log_filters import redact
from bot.settings import Settings
from core.errors import CompanionError, ModelError, ModelSetupError
from core.llm import OpenAIChat
from core.openai_package import openai
from core.wire.health import TOOLS_FIX

OPENAI_URL = "https://api.openai.com/v1"


def _model_problem(error: Exception, where: str, model: str, what: str) -> str:
    if isinstance(error, openai.APITimeoutError):
        return f"{what}: {where} did not answer within {TIMEOUT:g} s; is the server up?"
    if isinstance(error, openai.APIConnectionError):
        return (
            f"{what}: cannot connect to {where}; is the server running and OPENAI_BASE_URL right?"
        )
    if isinstance(error, openai.AuthenticationError | openai.PermissionDeniedError):
        return f"{what}: {where} refused OPENAI_API_KEY (HTTP {error.status_code}); set a valid key"
    if isinstance(error, openai.NotFoundError):
        return (
            f"{what}: {where} has no model {model!r} (HTTP 404); check the model name, and "
            "that OPENAI_BASE_URL ends where the API starts (often /v1)"
        )
    if isinstance(error, openai.APIStatusError):
        return f"{what}: {where} answered HTTP {error.status_code}: {redact(error.message[:200])}"
    return f"{what}: {where} gave an answer that is not OpenAI-compatible ({_why(error)})"


async def check_model(settings: Settings) -> list[Result]:
    try:
        settings.require_model()
    except CompanionError as error:
        return [fail(f"model: {error}")]
    model, where = settings.model or "", settings.openai_base_url or OPENAI_URL
    client = openai.AsyncOpenAI(
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key or "not-needed",
        timeout=min(settings.model_timeout, TIMEOUT),
        max_retries=0,
    )
    async with client:
        try:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Say ok."}], max_tokens=1
            )
            results = [
                ok(f"model: {model} answers at {where}"),
                await _check_functions(client, model),
            ]
        except Exception as error:
            results = [fail(_model_problem(error, where, model, "model"))]
        if not settings.embeds_in_process and settings.embedding_model != "none":
            results.append(await _check_embeddings(client, settings, where))
    return results


PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "record_ok",
        "description": "Record that the check passed.",
        "parameters": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
    },
}
PROBE = [
    {"role": "system", "content": "You are a test. Answer only by calling a function."},
    {"role": "user", "content": "Call the function record_ok with ok set to true."},
]


async def _check_functions(client: openai.AsyncOpenAI, model: str) -> Result:
    chat = OpenAIChat(client, model)
    try:
        without = await chat.complete(PROBE, max_tokens=1)
        answer = await chat.complete(PROBE, [PROBE_TOOL], max_tokens=96)
    except ModelSetupError as error:
        return fail(f"functions: {error}; to fix: {error.fix}")
    except ModelError as error:
        return fail(f"functions: {error}")
    if without.prompt_tokens and answer.prompt_tokens == without.prompt_tokens:
        return fail(
            f"functions: the endpoint drops the function schemas (it counts {answer.prompt_tokens} "
            "prompt tokens with and without them), so Companion cannot save or search memory; "
            f"to fix: {TOOLS_FIX}"
        )
    if any(call.name == "record_ok" for call in answer.tool_calls):
        return ok(f"functions: {model} calls functions")
    return warn(
        f"functions: the endpoint takes function schemas, but {model} answered in text where "
        "it was asked to call one; a model without tool training will not keep its memory well"
    )


async def _check_embeddings(client: openai.AsyncOpenAI, settings: Settings, where: str) -> Result:
    model, dim = settings.embedding_model or "", settings.embedding_dim
    try:
        response = await client.embeddings.create(model=model, input=["ok"])
        size = len(response.data[0].embedding)
    except Exception as error:
        return fail(_model_problem(error, where, model, "embedding model"))
    if size != dim:
        return fail(
            f"embedding model: {model} returns {size} dimensions but COMPANION_EMBEDDING_DIM is "
            f"{dim}; set COMPANION_EMBEDDING_DIM={size} and run `companion reembed --dim {size}`"
        )
    return ok(f"embedding model: {model} returns {size} dimensions")
