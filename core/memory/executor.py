"""The function executor: schemas from signatures, then parse, validate, run, report.

`schema_of(fn)` turns a typed tool function and its docstring into an OpenAI tool schema.
`execute(call, ctx)` never raises for the model's mistakes: unknown function, bad JSON,
missing or wrong arguments, a tool's own `ToolError` all come back as an `Outcome` with
`ok=False` and a message the model can act on.
"""

from __future__ import annotations

import inspect
import json
import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.errors import ToolError
from core.events import clean_text
from core.memory.tools import TOOLS, ToolContext
from core.ports import ToolCall

log = logging.getLogger(__name__)

Tool = Callable[..., Awaitable[str]]
_JSON_TYPES = {str: "string", int: "integer", bool: "boolean", float: "number"}


@dataclass(frozen=True)
class Outcome:
    call: ToolCall
    result: str
    ok: bool
    heartbeat: bool = False


def _params(fn: Tool) -> list[tuple[inspect.Parameter, type]]:
    hints = typing.get_type_hints(fn)
    return [(p, hints[p.name]) for p in list(inspect.signature(fn).parameters.values())[1:]]


def _param_docs(doc: str) -> tuple[str, dict[str, str]]:
    summary, _, rest = doc.strip().partition("\n\n")
    described = {}
    for line in rest.splitlines():
        name, sep, text = line.strip().partition(": ")
        if sep:
            described[name] = text
    return " ".join(summary.split()), described


def schema_of(fn: Tool) -> dict[str, Any]:
    description, described = _param_docs(fn.__doc__ or "")
    properties = {
        p.name: {"type": _JSON_TYPES[hint], "description": described.get(p.name, "")}
        for p, hint in _params(fn)
    }
    required = [p.name for p, _ in _params(fn) if p.default is inspect.Parameter.empty]
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


REGISTRY: dict[str, Tool] = {fn.__name__: fn for fn in TOOLS}
# Tools that touch no database row while they run (blocks are saved with the turn).
IN_MEMORY = {"send_message", "core_memory_append", "core_memory_replace"}
SCHEMAS: list[dict[str, Any]] = [schema_of(fn) for fn in TOOLS]


def _coerce(name: str, value: Any, hint: type) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif hint is str:
        if isinstance(value, str):
            return clean_text(value)  # JSON may carry \u0000, which Postgres cannot store
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    kind = _JSON_TYPES[hint]
    article = "an" if kind[0] in "aeiou" else "a"
    raise ToolError(f"argument {name!r} must be {article} {kind}, got {json.dumps(value)[:100]}")


def parse_arguments(fn: Tool, raw: str) -> dict[str, Any]:
    """Validate the model's JSON arguments against the tool's signature."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as error:
        raise ToolError(f"the arguments are not valid JSON ({error.msg} at {error.pos})") from None
    if not isinstance(args, dict):
        raise ToolError("the arguments must be a JSON object")
    params = _params(fn)
    known = {p.name for p, _ in params}
    unknown = sorted(set(args) - known - {"request_heartbeat"})
    if unknown:
        raise ToolError(
            f"unknown argument(s) {', '.join(unknown)}; {fn.__name__} takes {', '.join(known)}"
        )
    missing = [
        p.name for p, _ in params if p.default is inspect.Parameter.empty and p.name not in args
    ]
    if missing:
        raise ToolError(f"missing required argument(s): {', '.join(missing)}")
    return {p.name: _coerce(p.name, args[p.name], hint) for p, hint in params if p.name in args}


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
