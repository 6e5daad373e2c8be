"""The README's sample session is what `companion chat` really prints on a terminal.

The chat runs in a pseudo-terminal (so it is interactive, as for a person), against the
fake model answering with the README's words; the transcript, with colours stripped, must
contain the README's lines from the greeting on.
"""

from __future__ import annotations

import asyncio
import os
import pty
import re
import subprocess

from tests.conftest import COMPANION, ROOT, cli_env
from tests.fake_openai import calls, is_summary_request, last, say, tool_call

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TOKENS = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\r|[^\x1b\r]+")


def screen(raw: str) -> list[str]:
    """The lines a terminal would show: carriage returns and erase-line applied, no colours."""
    lines = []
    for physical in raw.replace("\r\n", "\n").split("\n"):
        text: list[str] = []
        cursor = 0
        for token in TOKENS.findall(physical):
            if token == "\r":
                cursor = 0
            elif token == "\x1b[K":
                del text[cursor:]
            elif not token.startswith("\x1b"):
                text[cursor : cursor + len(token)] = token
                cursor += len(token)
        lines.append("".join(text))
    return lines


def readme_session() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```text\n$ make chat\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Companion: chatting as"))
    return lines[start:]


def miso_brain(body):
    if is_summary_request(body):
        return say("summary")
    if last(body).get("role") == "tool":
        return say("Got it: Miso, noted!")
    return calls(tool_call("core_memory_append", label="human", content="My cat is called Miso."))


async def test_the_readme_session_is_what_chat_prints(fake, pg_url, schema):
    fake.brain = miso_brain
    env = {**cli_env(fake, pg_url, schema), "USER": "ana", "LOGNAME": "ana", "TERM": "xterm"}
    main, secondary = pty.openpty()
    proc = subprocess.Popen(  # noqa: ASYNC220 (a pty needs the file descriptors themselves)
        [*COMPANION, "chat"], stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=ROOT
    )
    os.close(secondary)
    seen = bytearray()
    reading: asyncio.Future[bytes] | None = None  # one read at a time: a late one keeps its text

    async def read_until(marker: str, times: int = 1, within: float = 30.0) -> None:
        nonlocal reading
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while ANSI.sub("", seen.decode(errors="replace")).count(marker) < times:
            left = deadline - loop.time()
            assert left > 0, seen.decode(errors="replace")
            reading = reading or loop.run_in_executor(None, os.read, main, 4096)
            done, _ = await asyncio.wait({reading}, timeout=left)
            if done:
                seen.extend(reading.result())
                reading = None

    try:
        await read_until("you> ")
        os.write(main, b"remember that my cat is called Miso\r")
        await read_until("companion> Got it")
        await read_until("you> ", times=2)
        os.write(main, b"/memory\r")
        await read_until("I keep replies short.")
        os.write(main, b"/quit\r")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    lines = [line for line in screen(seen.decode()) if line.strip()]
    expected = readme_session()
    first = lines.index(expected[0])
    assert lines[first : first + len(expected)] == expected
