"""The function executor: one pydantic model per tool, then parse, validate, run, report.

`arguments_model(fn)` builds a pydantic model from a typed tool function: the signature
(less the `ToolContext`) gives the fields, their types and caps, the docstring their
descriptions. `schema_of(fn)` is that model's JSON schema cut to types and descriptions,
since every token of it is in every prompt. Validation is lenient where real OpenAI-compatible
servers are sloppy ("true" for true, "2" or 2.0 for 2, 42 for "42") and strict elsewhere.
`execute(call, ctx)` never raises for the model's mistakes: unknown function, bad JSON,
missing, unknown, wrong or over-long arguments, a tool's own `ToolError` all come back as an
`Outcome` with `ok=False` and a message, naming the argument, that the model can act on.
"""

from __future__ import annotations

import inspect
import json
import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    create_model,
)
from pydantic_core import ErrorDetails

from core.errors import ToolError
from core.events import clean_text, clean_value
from core.memory.tools import TOOLS, ToolContext
from core.ports import ToolCall

log = logging.getLogger(__name__)

Tool = Callable[..., Awaitable[str]]
_JSON_TYPES = {str: "string", int: "integer", bool: "boolean"}


@dataclass(frozen=True)
class Outcome:
    call: ToolCall
    result: str
    ok: bool
    heartbeat: bool = False


def _bool_word(value: Any) -> Any:
    """Some servers send "true"/"false" as strings; "yes" or 1 stay refused."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def _no_bool(value: Any) -> Any:
    """JSON true is not a number (pydantic's lax int would take it as 1)."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    return value


# What each base type accepts beyond itself. Strings: numbers become text, and JSON may
# carry \u0000, which Postgres cannot store. Integers: "2", " 2 " and 2.0, not 2.5 or true.
_LENIENT: dict[type, tuple[Any, ...]] = {
    str: (AfterValidator(clean_text),),
    int: (BeforeValidator(_no_bool),),
    bool: (Strict(), BeforeValidator(_bool_word)),
}
_CONFIG = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


def _param_docs(doc: str) -> tuple[str, dict[str, str]]:
    summary, _, rest = doc.strip().partition("\n\n")
    described = {}
    for line in rest.splitlines():
        name, sep, text = line.strip().partition(": ")
        if sep:
            described[name] = text
    return " ".join(summary.split()), described


def _base(hint: Any) -> type:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def arguments_model(fn: Tool) -> type[BaseModel]:
    """The model of `fn`'s arguments: its typed parameters after the `ToolContext`."""
    summary, described = _param_docs(fn.__doc__ or "")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in list(inspect.signature(fn).parameters.values())[1:]:
        hint = hints[param.name]
        default = ... if param.default is inspect.Parameter.empty else param.default
        lenient = Annotated[(hint, *_LENIENT[_base(hint)])]  # type: ignore[valid-type]
        fields[param.name] = (lenient, Field(default, description=described.get(param.name)))
    return create_model(fn.__name__, __config__=_CONFIG, __doc__=summary, **fields)


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI tool schema: pydantic's, without titles, defaults or limits (tokens)."""
    full = model.model_json_schema()
    properties = {
        name: {"type": spec["type"], "description": spec.get("description", "")}
        for name, spec in full["properties"].items()
    }
    return {
        "type": "function",
        "function": {
            "name": model.__name__,
            "description": model.__doc__,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": full.get("required", []),
            },
        },
    }


REGISTRY: dict[str, Tool] = {fn.__name__: fn for fn in TOOLS}
MODELS: dict[str, type[BaseModel]] = {fn.__name__: arguments_model(fn) for fn in TOOLS}
# Tools that touch no database row while they run (blocks are saved with the turn).
IN_MEMORY = {"send_message", "core_memory_append", "core_memory_replace"}
SCHEMAS: list[dict[str, Any]] = [schema_of(model) for model in MODELS.values()]


def _json_object(raw: str) -> dict[str, Any]:
    try:
        # Cleaned whole, keys too: an unknown key is named in the error the turn stores.
        args = clean_value(json.loads(raw)) if raw.strip() else {}
    except json.JSONDecodeError as error:
        raise ToolError(f"the arguments are not valid JSON ({error.msg} at {error.pos})") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise ToolError("the arguments are not valid JSON (a number is too long)") from None
    except RecursionError:
        raise ToolError("the arguments are not valid JSON (nested too deeply)") from None
    if not isinstance(args, dict):
        raise ToolError("the arguments must be a JSON object")
    return args


def _explain(model: type[BaseModel], errors: list[ErrorDetails]) -> str:
    """One sentence for the model, naming the arguments at fault."""
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        takes = ", ".join(model.model_fields)
        return f"unknown argument(s) {', '.join(unknown)}; {model.__name__} takes {takes}"
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    error = errors[0]
    name, value, limits = str(error["loc"][0]), error["input"], error.get("ctx", {})
    if error["type"] == "string_too_long":
        return (
            f"argument {name!r} has {len(value):,} characters, over its limit of "
            f"{limits['max_length']:,}; shorten it or split it over several calls"
        )
    if error["type"] == "less_than_equal":
        return f"argument {name!r} must be at most {limits['le']:,}, got {value}"
    kind = _JSON_TYPES[_base(model.model_fields[name].annotation)]
    article = "an" if kind[0] in "aeiou" else "a"
    return f"argument {name!r} must be {article} {kind}, got {json.dumps(value)[:100]}"


def parse_arguments(fn: Tool, raw: str) -> dict[str, Any]:
    """Validate the model's JSON arguments against the tool's signature."""
    args = _json_object(raw)
    model = MODELS[fn.__name__]
    if "request_heartbeat" not in model.model_fields:
        args.pop("request_heartbeat", None)  # asked of every function by habit: harmless
    try:
        return dict(model.model_validate(args))
    except ValidationError as error:
        raise ToolError(_explain(model, error.errors(include_url=False))) from None


def _truncate(result: str, limit: int) -> str:
    if len(result) <= limit:
        return result
    return result[:limit] + f"\n[... cut: the result had {len(result)} characters]"


async def execute(call: ToolCall, ctx: ToolContext) -> Outcome:
    fn = REGISTRY.get(call.name)
    limit = ctx.config.max_tool_output_chars
    if fn is None:
        names = ", ".join(REGISTRY)
        return Outcome(
            call, f"Error: unknown function {call.name[:80]!r}. Functions: {names}", False
        )
    try:
        args = parse_arguments(fn, call.arguments)
        if call.name in IN_MEMORY:
            result = await fn(ctx, **args)
        else:
            async with ctx.store.session.begin_nested():  # a failed query leaves no half-writes
                result = await fn(ctx, **args)
    except ToolError as error:
        return Outcome(call, _truncate(f"Error: {error}", limit), False)
    except Exception:  # a bug of ours: tell the model, keep the turn alive, log it
        log.exception("tool %s failed", call.name)
        return Outcome(
            call, f"Error: {call.name} failed inside the engine; try something else", False
        )
    return Outcome(call, _truncate(result, limit), True, bool(args.get("request_heartbeat")))
