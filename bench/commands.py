"""How long every `companion` command takes, as an operator runs it: a new process each time,
on the embedded database (no DATABASE_URL), with the built-in local embedder.

    python bench/commands.py [--runs 3] [--companion .venv/bin/companion] [--against OTHER]
                             [--only LABEL]

For each command: the seconds until its first line (stdout or stderr) and until it exits,
the median of --runs warm runs (the embedded database already initialised; each command
runs once first, unmeasured), and the very first command of all (cold: initdb and the
migrations). The model is tests.fake_openai on loopback, so `chat` measures Companion, not a
model. `web` is a server: its first line says it is starting, "done" is its line saying it
serves (`READY`), then SIGTERM.
`chat` on a terminal runs in a pseudo-terminal: its first line is what it prints first,
"done" is its prompt (ready for a message); the member then types for TYPING seconds, and
the row below it is the time from the message to the reply. `--against OTHER` (another
checkout's `companion`, e.g. a script running `python -m bot.cli` there) runs each command
with it too, alternately, on the same database: a row `  against` under each, measured
in the same moments, so that other work on the machine weighs on both alike.
`chat (piped, stderr a tty)` is `echo hello | companion chat` typed at a terminal: stdout
piped, stderr a pseudo-terminal, where a piped chat says what it is doing until its first
reply; the row below it is the time to that reply.
CPU is the process's own user + system time (and its children's: pg_ctl when it starts
the server), which other work on the machine inflates less than wall time. The targets
(issue 31): first line within 1 s, done within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import resource
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, revision, stop_warm_servers
from tests.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent


def commands(scratch: Path) -> list[tuple[str, list[str], str]]:
    """(label, arguments, stdin) of every command, in an order where each has what it needs."""
    export = str(scratch / "ana.json")
    return [
        ("--version", ["--version"], ""),
        ("--help", ["--help"], ""),
        ("chat (piped, 1 message)", ["chat", "--user", "ana"], "hello\n"),
        (TTY_STDERR, ["chat", "--user", "ana"], "hello\n"),
        ("export", ["export", "--tenant", "local", "--user", "ana", "-o", export], ""),
        (
            "import --replace",
            ["import", export, "--tenant", "local", "--user", "bo", "--replace"],
            "",
        ),
        ("reset --yes", ["reset", "--tenant", "local", "--user", "bo", "--yes"], ""),
        ("link --user", ["link", "--tenant", "local", "--user", "ana"], ""),
        ("link --admin", ["link", "--tenant", "local", "--admin"], ""),
        ("openers list", ["openers", "list"], ""),
        ("tick --dry-run", ["tick", "--dry-run"], ""),
        ("tick", ["tick"], ""),
        ("usage", ["usage"], ""),
        ("reembed --missing", ["reembed", "--missing"], ""),
        ("tenant erase (none)", ["tenant", "erase", "slack:TNONE", "--yes"], ""),
        ("doctor", ["doctor"], ""),
        ("web (to serving)", ["web"], ""),
    ]


async def timed(
    companion: str, args: list[str], stdin: str, env: dict, tty_stderr: bool = False
) -> tuple[float, float, int, float, float]:
    """(seconds to the first output, seconds to exit, exit status, CPU seconds it used,
    seconds to the first output on stdout); `tty_stderr`: stderr is a terminal."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    main, secondary = pty.openpty() if tty_stderr else (-1, -1)
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        companion,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=secondary if tty_stderr else asyncio.subprocess.PIPE,
        env={**env, "TERM": "xterm"} if tty_stderr else env,
    )
    first: float | None = None
    on_stdout: float | None = None
    ready = READY.get(args[0])
    serving: float | None = None

    def note(chunk: bytes, seen: bytes, stdout: bool) -> bytes:
        nonlocal first, serving, on_stdout
        first = first if first is not None else time.perf_counter() - started
        if stdout and on_stdout is None:
            on_stdout = time.perf_counter() - started
        seen = seen[-200:] + chunk
        if ready and serving is None and ready in seen:
            serving = time.perf_counter() - started
            proc.send_signal(signal.SIGTERM)
        return seen

    async def watch(stream: asyncio.StreamReader, stdout: bool = False) -> None:
        seen = b""
        while chunk := await stream.read(4096):
            seen = note(chunk, seen, stdout)

    async def watch_terminal() -> None:
        os.close(secondary)
        seen, loop = b"", asyncio.get_running_loop()
        while True:
            try:
                chunk = await loop.run_in_executor(None, os.read, main, 4096)
            except OSError:  # the other side is closed
                break
            if not chunk:
                break
            seen = note(chunk, seen, False)
        os.close(main)

    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    assert tty_stderr or proc.stderr is not None
    errors = watch_terminal() if tty_stderr else watch(proc.stderr)  # type: ignore[arg-type]
    await asyncio.gather(watch(proc.stdout, stdout=True), errors)
    code = await proc.wait()
    done = serving or time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    first_out = on_stdout if on_stdout is not None else done
    return (first if first is not None else done), done, code, cpu, first_out


READY = {"web": b", links to "}  # a server's line saying it serves: its "done"
# `echo hello | companion chat` typed at a terminal: stdout piped, stderr the terminal.
TTY_STDERR = "chat (piped, stderr a tty)"


TYPING = 3.0  # seconds the member takes to type the first message, in the terminal chat


async def timed_terminal(companion: str, env: dict) -> tuple[float, float, float, int, float]:
    """`companion chat` on a terminal: (seconds to its first output, to its prompt, from the
    message typed to the reply, exit status, CPU seconds it used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    main, secondary = pty.openpty()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        companion,
        "chat",
        "--user",
        "ana",
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**env, "TERM": "xterm"},
    )
    os.close(secondary)
    loop = asyncio.get_running_loop()
    seen = b""
    first: float | None = None

    async def until(marker: bytes) -> float:
        nonlocal seen, first
        while marker not in seen:
            chunk = await loop.run_in_executor(None, os.read, main, 4096)
            if not chunk:
                raise RuntimeError(f"chat ended before {marker!r}: {seen[-500:]!r}")
            seen += chunk
            first = first if first is not None else time.perf_counter() - started
        return time.perf_counter() - started

    prompt = await until(b"you>")
    await asyncio.sleep(TYPING)
    seen = b""
    typed = time.perf_counter() - started
    os.write(main, b"hello\r")
    reply = await until(b"companion>") - typed
    os.write(main, b"/quit\r")
    code = await proc.wait()
    os.close(main)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert first is not None
    return first, prompt, reply, code, cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="warm runs per command (median)")
    parser.add_argument("--companion", default=str(ROOT / ".venv" / "bin" / "companion"))
    parser.add_argument("--against", help="another `companion` to run alternately with it")
    parser.add_argument("--only", help="only the commands whose label contains this")
    args = parser.parse_args()
    print(f"{machine()}; code {revision()}; {args.runs} warm runs per command")
    if args.against:
        print(f"  against: {args.against}")
    with tempfile.TemporaryDirectory(prefix="companion-bench-commands-") as scratch:
        async with FakeOpenAI() as fake:
            ours = ("OPENAI_", "COMPANION_")
            env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
            env.pop("DATABASE_URL", None)
            env.update(
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY="bench",
                COMPANION_MODEL="fake",
                COMPANION_DATA_DIR=str(Path(scratch) / "data"),
                COMPANION_HTTP_HOST="127.0.0.1",
                COMPANION_HTTP_PORT=str(free_port()),
            )
            cold = await timed(args.companion, ["usage"], "", env)
            print(f"cold start (initdb, migrations): usage took {cold[1]:.2f} s\n")
            print(f"{'command':<26} {'first line':>10} {'done':>8} {'CPU':>7}  exit")
            listed = [c for c in commands(Path(scratch)) if (args.only or "") in c[0]]
            worst = await every_command(args, env, listed)
            print(f"\nslowest database command: first line {worst[0]:.2f} s, done {worst[1]:.2f} s")
            stop_warm_servers(Path(scratch))


async def every_command(
    args: argparse.Namespace, env: dict, listed: list[tuple[str, list[str], str]]
) -> tuple[float, float]:
    """Print each command's row (and the other `companion`'s); the slowest (first, done)."""
    worst_first = worst_done = 0.0
    which = [args.companion, *([args.against] if args.against else [])]
    for label, argv, stdin in listed:
        runs: dict[str, list[tuple]] = {exe: [] for exe in which}
        tty = label == TTY_STDERR
        for exe in which:
            await timed(exe, argv, stdin, env, tty)  # warm it (and its data)
        for _ in range(args.runs):
            for exe in which:
                runs[exe].append(await timed(exe, argv, stdin, env, tty))
        for exe, got in runs.items():
            first, done = median(got, 0), median(got, 1)
            name = label if exe == args.companion else "  against"
            print(row(name, first, done, median(got, 3), {r[2] for r in got}))
            if tty:
                print(f"{'  first reply (stdout)':<26} {median(got, 4):>9.2f}s")
            if argv[0] not in ("--version", "--help") and exe == args.companion:
                worst_first, worst_done = max(worst_first, first), max(worst_done, done)
        if label == TTY_STDERR:  # and as a person chats: on a terminal
            chats: dict[str, list[tuple]] = {exe: [] for exe in which}
            for exe in which:
                await timed_terminal(exe, env)
            for _ in range(args.runs):
                for exe in which:
                    chats[exe].append(await timed_terminal(exe, env))
            for exe, got in chats.items():
                first, done, codes = median(got, 0), median(got, 1), {r[3] for r in got}
                name = "chat (terminal, prompt)" if exe == args.companion else "  against"
                print(row(name, first, done, median(got, 4), codes))
                print(f"{'  reply after typing':<26} {'':>10} {median(got, 2):>7.2f}s")
                if exe == args.companion:
                    worst_first, worst_done = max(worst_first, first), max(worst_done, done)
    return worst_first, worst_done


def median(runs: list[tuple], at: int) -> float:
    return statistics.median(r[at] for r in runs)


def row(label: str, first: float, done: float, cpu: float, codes: set[int]) -> str:
    return f"{label:<26} {first:>9.2f}s {done:>7.2f}s {cpu:>6.2f}s  {sorted(codes)}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    asyncio.run(main())
