"""`companion chat`: the terminal front end.

On a terminal it is interactive (line editing, /memory, /quit; --verbose shows the agent's
inner monologue, function calls, and each model call's tokens: prompt, cached, output).
Its banner comes as soon as the database is open (`banner`), and what the first turn
loads (the embedding model, the tokenizer, the model endpoint's client) loads in the
background while the member types (`warm_up`). Otherwise every input line
is one user message, handled in order, and only the agent's messages are written to stdout;
it exits once its messages have their vectors. On a terminal the embedding worker's
catch-up (vectors that earlier processes left undone) waits for the first turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, TextIO

from core.errors import EventTooLarge
from core.events import EventKind, InboundEvent
from core.local_embedder import LocalEmbedder
from core.multilingual_embedder import MultilingualEmbedder
from core.ports import Embedder

if TYPE_CHECKING:
    from core.members.service import Members
    from core.memory.turn import TurnResult
    from core.runtime.engine import Engine
    from core.scope import Scope

log = logging.getLogger(__name__)

DIM, ITALIC, BOLD, CYAN, RESET = "\033[2m", "\033[3m", "\033[1m", "\033[36m", "\033[0m"
HELP = "Commands: /memory shows working context, /help this help, /quit leaves (or Ctrl-D)."
COMMANDS = ("/memory", "/help", "/quit", "/exit")


def banner(tenant: str, user: str) -> str:
    """The interactive chat's first line, shown as soon as the database is open."""
    return f"{BOLD}Companion{RESET}: chatting as {user}@{tenant}. {HELP}\n"


def _load_for_a_turn() -> None:
    """What a turn imports and loads on first use: the model endpoint's client (openai) and
    the tokenizer's tables (in a thread: the loop stays free)."""
    from core.memory.tokens import TokenCounter

    importlib.import_module("core.llm")
    TokenCounter.count("warm up")


async def warm_up(embedder: Embedder | None) -> None:
    """Load what the first turn needs in the background, so that its reply waits for them
    less; a failure here is the first turn's to report."""
    try:
        await asyncio.to_thread(_load_for_a_turn)
        if embedder is not None:
            await embedder.embed(["warm up"])
    except Exception as error:  # the turn meets it again, and says so
        log.debug("warming up for the first turn failed: %s", error)


def _trace(result: TurnResult | None, out: TextIO, color: bool) -> None:
    if result is None:
        return
    dim, italic, reset = (DIM, ITALIC, RESET) if color else ("", "", "")
    for step in result.steps:
        if step.thought:
            out.write(f"{dim}{italic}  (thinking) {step.thought}{reset}\n")
        for outcome in step.outcomes:
            args = outcome.call.arguments
            out.write(f"{dim}  → {outcome.call.name}({args[:300]}){reset}\n")
            result_text = outcome.result.replace("\n", "\n    ")
            out.write(f"{dim}  ← {result_text[:600]}{reset}\n")
    if result.warnings:
        out.write(f"{dim}  [memory pressure warning issued]{reset}\n")
    if result.flushes:
        out.write(f"{dim}  [queue flushed {result.flushes}x: older messages summarised]{reset}\n")
    for call in result.calls:
        out.write(
            f"{dim}  [{call.purpose} call: {call.prompt_tokens:,} prompt tokens "
            f"({call.cached_tokens:,} cached), {call.completion_tokens:,} output]{reset}\n"
        )


async def _show_memory(members: Members, tenant: str, user: str, out: TextIO) -> None:
    view = await members.view(tenant, user)
    for label, value, limit in view.blocks if view else []:
        out.write(f"{BOLD}[{label}]{RESET} ({len(value)}/{limit})\n")
        out.write(f"{value}\n")


ORIGIN = f"{socket.gethostname()}:{os.getpid()}"


async def _sender_alive(engine: Engine, event_id: int) -> bool:
    """Is the chat process that sent this event still running (on this machine)?"""
    origin = str((await engine.outbox.meta_of(event_id)).get("origin", ""))
    host, _, pid = origin.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unknown_command(text: str) -> str | None:
    """What to answer, here, to a line that looks like a command but is none (`/foo`): it
    is not sent to the model. A path or a lone slash is a message like any other."""
    word = text.strip().split(maxsplit=1)[0] if text.strip() else ""
    if len(word) < 2 or not word.startswith("/") or "/" in word[1:]:
        return None
    if word.lower() in COMMANDS:
        return None
    return f"{word} is not a command here. {HELP}"


async def _say(
    engine: Engine, scope: Scope, text: str, out: TextIO, verbose: bool, tty: bool
) -> bool | None:
    """Send one message and show the replies; False when the turn failed (the member got
    an apology, or a notice that the model is down, instead of an answer), None when the
    message was refused (too long: it is not stored, and stderr says so)."""
    if tty:
        out.write(f"{DIM}companion is thinking…{RESET}")
        out.flush()
    try:
        event = InboundEvent(EventKind.USER_MESSAGE, text, meta={"origin": ORIGIN})
        exchange = await engine.converse(scope, event)
    except EventTooLarge as error:
        sys.stderr.write(f"companion: {error}\n")
        return None
    finally:
        if tty:
            out.write("\r\033[K")
    if verbose:
        _trace(exchange.result, out if tty else sys.stderr, tty)
    # Answers to this chat's earlier messages that waited (for a model that was down) first.
    earlier = await engine.outbox.take_earlier(scope, exchange.event_id, {"origin": ORIGIN})
    for reply in earlier + exchange.replies:
        out.write(f"{CYAN}{BOLD}companion>{RESET} {reply}\n" if tty else f"{reply}\n")
    out.flush()
    if exchange.result is None:  # handled by another process, or waiting behind one
        return bool(exchange.replies)  # that waits for the model
    return exchange.result.error is None


async def run_chat(
    engine: Engine,
    members: Members,
    tenant: str,
    user: str,
    verbose: bool,
    stdin: TextIO,
    stdout: TextIO,
) -> int:
    """Chat until the input ends; the exit status: 1 when piped messages were sent and
    every one of them failed (only apologies came back), 2 when one was refused (too long,
    not stored), else 0."""
    scope = await engine.agent(tenant, user, display_name=user)
    # Anything an earlier crash left behind goes first: pending events, and replies that
    # were written but never shown (also openers written while the member was away).
    waiting = []
    for done in await engine.drain(scope):
        if not await _sender_alive(engine, done.event_id):  # else that chat shows it
            waiting += await engine.outbox.take_replies(done.event_id)
    for text in waiting + await engine.outbox.take_waiting(scope):
        stdout.write(f"{CYAN}{BOLD}companion>{RESET} {text}\n" if stdin.isatty() else f"{text}\n")
    if not stdin.isatty():
        sent = answered = refused = 0
        for line in stdin:
            text = line.rstrip("\r\n")
            if text.strip():
                outcome = await _say(engine, scope, text, stdout, verbose, tty=False)
                refused += outcome is None
                sent += outcome is not None
                answered += bool(outcome)
        if sent and engine.embeddings is not None:
            # Its messages get their vectors before it exits: a script's last message is
            # found by meaning at once, not only when some later process embeds it.
            await engine.embeddings.settled()
        if sent and not answered:
            sys.stderr.write(
                f"companion: none of the {sent} messages was answered (the log says why; "
                "`companion doctor` checks the model endpoint); they are saved\n"
            )
            return 1
        return 2 if refused else 0  # a message to fix (cut it, or send it as a file)
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    # What the first turn loads, loaded while the member types (not before the prompt is
    # shown: it would compete with what comes first; nor for piped messages: they come at
    # once). An endpoint's embedder is not called for it.
    embedder = engine.mind.embedder
    local = embedder if isinstance(embedder, LocalEmbedder | MultilingualEmbedder) else None
    warming = asyncio.ensure_future(warm_up(local))
    try:
        return await _converse(engine, members, scope, tenant, user, verbose, stdout)
    finally:
        warming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await warming


async def _converse(
    engine: Engine,
    members: Members,
    scope: Scope,
    tenant: str,
    user: str,
    verbose: bool,
    stdout: TextIO,
) -> int:
    """The terminal's loop: a prompt, the member's line, the agent's replies."""
    while True:
        try:
            text = await asyncio.to_thread(input, f"{BOLD}you>{RESET} ")
        except (EOFError, KeyboardInterrupt):
            stdout.write("\n")
            return 0
        command = text.strip().lower()
        if command in ("/quit", "/exit"):
            return 0
        if command == "/help":
            stdout.write(HELP + "\n")
        elif command == "/memory":
            await _show_memory(members, tenant, user, stdout)
        elif answer := unknown_command(text):
            stdout.write(answer + "\n")
        elif text.strip():
            await _say(engine, scope, text, stdout, verbose, tty=True)
