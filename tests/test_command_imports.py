"""The quick commands import what they need, not every command's modules (issue 31, finding 4:
imports were most of each command's second).

Each command runs as an operator types it, in a process of its own, with its output
streams watched: at its first line, the modules loaded so far are noted. None of the quick
commands may have loaded the platforms' clients, the model's client (`openai`: most of a
second alone), the engine's turn (the turn, the tools' pydantic schemas) or the embedding
model by then; `bench/commands.py` measures the time this buys.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, companion
from tests.test_run import free_port

# Runs `bot.cli.main` with stdout and stderr noting, at the first write to either (the
# first holding NOTE_AT when it is set), every module loaded so far (into the file named by
# the first argument).
FIRST_LINE = """
import os
import sys

class Noting:
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        global noted
        if text and not noted and os.environ.get("NOTE_AT", "") in text:
            noted = True
            with open(sys.argv[1], "w") as file:
                file.write("\\n".join(sorted(sys.modules)))
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)

noted = False
sys.stdout, sys.stderr = Noting(sys.stdout), Noting(sys.stderr)
from bot.cli import main
sys.exit(main(sys.argv[2:]))
"""

PLATFORMS = ("discord", "slack_bolt", "slack_sdk")
MODEL = ("openai", "core.llm")
TURN = ("core.memory.turn", "core.memory.executor", "core.memory.tools", "core.runtime.engine")
EMBEDDING_MODEL = ("onnxruntime", "numpy", "tokenizers")
NEVER_QUICK = (*PLATFORMS, *MODEL, *TURN, *EMBEDDING_MODEL, "prometheus_client", "alembic")


async def loaded_at_first_line(
    env: dict, scratch: Path, *args: str, at: str = ""
) -> tuple[set[str], str]:
    """(the modules loaded when `companion ARGS` wrote its first line, or its first line
    holding `at`; everything it wrote)."""
    noted = scratch / f"{'-'.join(args).replace('/', '_')}{at.replace(' ', '_')}.modules"
    env = {**env, "NOTE_AT": at}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FIRST_LINE,
        str(noted),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    if args[0] == "web":  # a server: until it is ready, then it is stopped
        said = await asyncio.wait_for(proc.stdout.readuntil(b", links to "), 60)
        proc.send_signal(signal.SIGTERM)
        said += await asyncio.wait_for(proc.stdout.read(), 30)
    else:
        said = await asyncio.wait_for(proc.stdout.read(), 60)
    assert await proc.wait() == 0, said.decode()
    return set(noted.read_text().split()), said.decode()


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names or m in names)


async def python_says(code: str) -> str:
    """What `python -c CODE` prints, run from the repository; it must exit 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, cwd=ROOT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    return out.decode()


@pytest.fixture
async def env(fake, pg_url, schema):
    port = str(free_port())
    env = cli_env(fake, pg_url, schema, COMPANION_HTTP_HOST="127.0.0.1", COMPANION_HTTP_PORT=port)
    first = await companion(env, "usage")  # the schema's tables, created once
    assert first.code == 0, first
    return env


QUICK = [  # (the command, what it says): each as on a fresh database
    (("usage",), "no model usage recorded"),
    (("openers", "list"), "no openers scheduled"),
    (("tick",), "0 openers (0 sent"),  # nothing due: the engine is never built
    (("tick", "--dry-run"), "(dry run, nothing changed"),
    (("link", "--tenant", "local", "--admin"), "/signin?token="),
    (("tenant", "erase", "slack:TNONE", "--yes"), "nothing to erase"),
    (("reembed", "--missing"), "re-embedded 0 passages and messages"),  # the model not loaded
]


async def test_the_quick_commands_load_no_client_no_turn_no_model(env, tmp_path):
    """All at once (each its own process): the suite's time, not each command's, is at stake."""
    found = await asyncio.gather(*(loaded_at_first_line(env, tmp_path, *a) for a, _ in QUICK))
    wrong = {}
    for (args, says), (modules, said) in zip(QUICK, found, strict=True):
        assert says in said, (args, said)
        assert "sqlalchemy" in modules, f"{args}: it did open the database"
        if heavy(modules, NEVER_QUICK):
            wrong[" ".join(args)] = heavy(modules, NEVER_QUICK)
    assert not wrong, wrong


async def test_the_inspector_says_it_is_starting_then_serves_without_the_engine(env, tmp_path):
    """Its first line comes before the database and the pages' imports (most of a second);
    when it serves, it has loaded neither the engine nor the model."""
    modules, said = await loaded_at_first_line(env, tmp_path, "web")
    assert "starting the memory inspector on 127.0.0.1" in said.splitlines()[0], said
    assert not heavy(modules, ("aiohttp", "sqlalchemy", "bot.web", "bot.app"))
    modules, said = await loaded_at_first_line(env, tmp_path, "web", at=", links to ")
    assert "inspector on 127.0.0.1" in said and "stopped" in said
    assert "aiohttp" in modules and "bot.web" in modules
    assert not heavy(modules, (*PLATFORMS, *MODEL, *TURN, *EMBEDDING_MODEL))


async def test_the_doctor_says_its_first_line_before_the_checks_imports(env, tmp_path):
    modules, said = await loaded_at_first_line(env, tmp_path, "doctor")
    assert said.startswith("ok   settings: the environment parses\n")
    assert said.strip().splitlines()[-1].startswith("doctor: ")
    assert not heavy(modules, (*PLATFORMS, *MODEL, *TURN, "aiohttp", "sqlalchemy"))


async def test_the_model_client_comes_without_aiohttp(tmp_path):
    """openai would import its aiohttp transport (a tenth of a second of a chat's first turn
    and of the doctor) although Companion's clients speak httpx: `core.openai_package`."""
    code = (
        "import sys\n"
        "from core.llm import OpenAIChat\n"
        "from core.openai_package import openai\n"
        "openai.AsyncOpenAI(api_key='test', base_url='http://127.0.0.1:9/v1')\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = await python_says(code)
    modules = set(out.split())
    assert "openai" in modules and "httpx2" in modules
    assert not heavy(modules, ("aiohttp",))


async def test_a_chat_completion_loads_few_of_the_model_clients_types(fake):
    """`openai` imports every type it defines at once (the Responses API, evals, graders...;
    0.2 s of a piped chat's first reply): `core.openai_package` defers the names of
    `openai.types` and `openai.types.responses` to their first use. A chat completion with
    the functions' schemas, answered and read, loads neither; the names are all still
    there when asked for."""
    code = (
        "import asyncio, sys\n"
        "from core.llm import OpenAIChat\n"
        "from core.memory.executor import SCHEMAS\n"
        "from core.openai_package import openai\n"
        f"client = openai.AsyncOpenAI(api_key='test', base_url={fake.base_url!r})\n"
        "messages = [{'role': 'system', 'content': 'be kind'}, {'role': 'user', 'content': 'hi'}]\n"
        "done = asyncio.run(OpenAIChat(client, 'fake').complete(messages, SCHEMAS))\n"
        "print(done.tool_calls[0].name)\n"
        "print(' '.join(sorted(sys.modules)))\n"
        "print(openai.types.Batch.__name__, openai.types.responses.Response.__name__)\n"
    )
    out = await python_says(code)
    called, modules, names = out.splitlines()
    assert called == "send_message"
    assert "openai.types.chat.chat_completion" in modules.split()
    assert not {"openai.types.batch", "openai.types.responses.response"} & set(modules.split())
    assert names == "Batch Response"


async def test_companion_run_loads_a_platforms_modules_only_when_it_serves_it():
    """`companion run` imports Slack's stack (Bolt, its SDK, the Slack adapter: about half
    a second of CPU at every start, and the memory they hold) only to serve Slack, and
    Discord's only to serve Discord: what the run command imports before it knows which
    platforms are set (bot.run, bot.platforms) holds neither."""
    code = "import sys, bot.run, bot.platforms\nprint('\\n'.join(sorted(sys.modules)))\n"
    out = await python_says(code)
    modules = set(out.split())
    assert "bot.run" in modules and "aiohttp" in modules
    assert not heavy(modules, (*PLATFORMS, "adapters.slack", "adapters.discord"))
