"""`python -m MODULE ARGS` processes forked from a parent that has already imported Companion.

    proc = await spawn(sys.executable, "-m", "bot.cli", "run", env=env, stderr=PIPE)

`spawn` takes what `asyncio.create_subprocess_exec` takes and returns a process with the
part of `asyncio.subprocess.Process` the tests use (pid, returncode, stdin, stdout, stderr,
wait, communicate, send_signal, terminate, kill). A test that starts `companion` processes for
what a process does (signals, kills, restarts, replicas) gets a real one, but not one that
spends 0.6-0.8 s of CPU importing Companion first (of 0.8-1.0 s in all, measured): each is
forked from one warm parent per test process (`python -m tests.forked`), which imported every
module of `bot`, `core` and `adapters` once, started no thread and no event loop.

The child is then made what a new `python -m MODULE` would be: its stdin, stdout and stderr
the test's (pipes, /dev/null, a file), every other descriptor closed, its working directory,
environment and sys.argv the test's, Python's standard streams opened on them as at start,
the module run as `__main__` by runpy as `-m` does, and its exit as Python exits (non-daemon
threads joined, exit handlers run, streams flushed; SystemExit, a traceback, SIGINT). Its
parent is the warm one, which reports its exit status; its process group is the test's.

What a fork cannot give is started as before, as a new interpreter: an environment that
differs from the warm parent's in anything but Companion's own settings (Python's own
variables are read at start-up; a library may read another at import), a program other than
`python -m` a module not yet imported, a pseudo-terminal for a stream, or an event loop other
than the one the warm parent was started for. Also with COMPANION_TEST_NO_FORK=1, to compare.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import io
import json
import os
import pkgutil
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent

# What may differ between the warm parent's environment and a child's: Companion's settings
# and the services it is pointed at, read when a command runs (bot/settings.py), never at
# import; tests/fault_driver.py's (not imported by the warm parent); pytest's note of the
# running test.
OWN_SETTINGS = (
    "COMPANION_",
    "OPENAI_",
    "DISCORD_",
    "SLACK_",
    "DATABASE_URL",
    "FAULT_",
    "PYTEST_CURRENT_TEST",
)

# Imported by the warm parent besides `bot`, `core` and `adapters` (what their modules import
# lazily when a command connects): a `companion run` imports 1,488 modules, a chat 1,031.
LIBRARIES = (
    "asyncpg",
    "sqlalchemy.dialects.postgresql.asyncpg",
    "apscheduler.triggers.interval",
    "apscheduler.executors.asyncio",
    "httpcore2",
    "h11",
    "anyio._backends._asyncio",
    "openai.resources.chat",
)
# Not imported by the warm parent: `bot.cli` is run as `__main__` (runpy wants it unimported);
# `bot.chat` notes the process's pid as it is imported (its ORIGIN: which chat sent what).
NOT_IMPORTED = ("bot.cli", "bot.chat")

MAX_MESSAGE = 1 << 20


# --- the warm parent ---------------------------------------------------------------------------


def _warm_up() -> None:
    import adapters
    import bot
    import core

    for package in (bot, core, adapters):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module.name not in NOT_IMPORTED:
                importlib.import_module(module.name)
    for name in LIBRARIES:
        importlib.import_module(name)
    assert threading.active_count() == 1, "the warm parent must not start threads: it forks"
    assert not set(NOT_IMPORTED) & set(sys.modules), "imported by another module after all"


def _serve(sock: socket.socket, said: tuple[bytes, bytes]) -> None:
    """Fork a child per request; report each child's pid, then its exit status."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    while True:
        ready, _, _ = select.select([sock, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        if not message:  # the test process is gone; its children go on as orphans would
            return
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, said)  # never returns
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _child(request: dict[str, Any], fds: list[int], said: tuple[bytes, bytes]) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # inheritable, as a new process's 0, 1 and 2 are
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, words in zip((1, 2), said, strict=True):
            if words:
                os.write(fd, words)
        _standard_streams()
        sys.path[0] = os.getcwd()  # `-m`: the working directory comes first
        sys.argv = ["-m", *request["args"]]  # runpy puts the module's path first, as `-m` does
        sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
        code = _run_as_main(request["module"])
    finally:
        os._exit(code)


def _standard_streams() -> None:
    """sys.stdin/stdout/stderr opened on descriptors 0-2 as Python opens them at start-up:
    the same encodings and errors, stderr line-buffered, stdout so on a terminal only."""
    streams = []
    for fd, before in enumerate((sys.__stdin__, sys.__stdout__, sys.__stderr__)):
        assert before is not None
        binary = io.open(fd, "rb" if fd == 0 else "wb", closefd=False)  # noqa: UP020
        streams.append(
            io.TextIOWrapper(
                binary,
                encoding=before.encoding,
                errors=before.errors,
                newline="\n",
                line_buffering=fd == 2 or os.isatty(fd),
                write_through=before.write_through,
            )
        )
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams  # type: ignore[misc]


def _run_as_main(module: str) -> int:
    """`python -m module`, to the exit status Python would give."""
    import runpy

    interrupted = False
    try:
        runpy._run_module_as_main(module)  # type: ignore[attr-defined]
        code = 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException as error:
        interrupted = isinstance(error, KeyboardInterrupt)
        sys.excepthook(type(error), error, error.__traceback__)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # Python's exit: threads, then
    atexit._run_exitfuncs()  # exit handlers, then the streams
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120
    if interrupted:  # as Python does: die of the SIGINT, for the parent to see
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    said = _saying(_warm_up)
    _serve(sock, said)


def _saying(warm_up: Callable[[], None]) -> tuple[bytes, bytes]:
    """What `warm_up` wrote to stdout and to stderr (a warning as a module is imported...):
    a new process would say it, so each child says it first."""
    kept = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    try:
        for fd, file in zip((1, 2), files, strict=True):
            os.dup2(file.fileno(), fd)
        warm_up()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, before in zip((1, 2), kept, strict=True):
            os.dup2(before, fd)
            os.close(before)
    said = []
    for file in files:
        file.seek(0)
        said.append(file.read())
        file.close()
    return said[0], said[1]


# --- the test process's side -------------------------------------------------------------------


class Forked:
    """A forked child, seen as `asyncio.subprocess.Process` shows a process."""

    def __init__(self, warm: _Warm, pid: int, pipes: dict[int, int]) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = warm.exit_of(pid)
        self._exited.add_done_callback(self._set_returncode)
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._pipes = pipes

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        for target, fd in self._pipes.items():
            if target == 0:
                pipe = os.fdopen(fd, "wb", buffering=0)
                transport, protocol = await loop.connect_write_pipe(
                    lambda: asyncio.streams.FlowControlMixin(loop=loop), pipe
                )
                self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
            else:
                reader = asyncio.StreamReader(limit=2**16, loop=loop)
                await loop.connect_read_pipe(
                    lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop),
                    os.fdopen(fd, "rb", buffering=0),
                )
                if target == 1:
                    self.stdout = reader
                else:
                    self.stderr = reader

    def _set_returncode(self, exited: asyncio.Future[int]) -> None:
        if not exited.cancelled():
            self.returncode = exited.result()

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes | None, bytes | None]:
        async def feed() -> None:
            if self.stdin is None:
                return
            try:
                if input:
                    self.stdin.write(input)
                    await self.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass  # as asyncio: the child closed its end
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes | None:
            return None if stream is None else await stream.read()

        _, out, err = await asyncio.gather(feed(), read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # as subprocess.Popen: nothing to signal once it ended
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = Forked | asyncio.subprocess.Process  # what `spawn` returns


class _Warm:
    """The warm parent of this test process, on the event loop it was started for."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.env = _warm_env()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forked", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock.setblocking(False)
        self.pids: asyncio.Queue[int] = asyncio.Queue()
        self.exits: dict[int, asyncio.Future[int]] = {}
        self.lock = asyncio.Lock()
        loop.add_reader(self.sock.fileno(), self._read)
        atexit.register(self.close)

    def _read(self) -> None:
        try:
            message = self.sock.recv(MAX_MESSAGE)
        except BlockingIOError:
            return
        if not message:  # the warm parent died: whatever waits on it fails
            self.loop.remove_reader(self.sock.fileno())
            for exited in self.exits.values():
                if not exited.done():
                    exited.set_exception(RuntimeError("the warm parent (tests/forked.py) died"))
            self.pids.put_nowait(-1)
            return
        said = json.loads(message)
        if "pid" in said:
            self.pids.put_nowait(said["pid"])
        else:
            exited = self.exit_of(said["exited"])
            if not exited.done():
                exited.set_result(said["code"])

    def exit_of(self, pid: int) -> asyncio.Future[int]:
        return self.exits.setdefault(pid, self.loop.create_future())

    async def fork(
        self, module: str, args: list[str], env: Mapping[str, str], cwd: str, fds: list[int]
    ) -> int:
        request = json.dumps({"module": module, "args": args, "env": dict(env), "cwd": cwd})
        async with self.lock:  # one request at a time: pids come back in order
            while True:
                try:
                    socket.send_fds(self.sock, [request.encode()], fds)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            pid = await self.pids.get()
        if pid < 0:
            raise RuntimeError("the warm parent (tests/forked.py) died")
        return pid

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# The environment the test process started with: while commands run in it
# (tests.conftest.run_cli), os.environ is theirs.
_STARTED_WITH = dict(os.environ)


def _warm_env() -> dict[str, str]:
    env = {k: v for k, v in _STARTED_WITH.items() if not k.startswith(OWN_SETTINGS)}
    env.update(PYTHONPATH=str(ROOT), PYTHONFAULTHANDLER="1")  # as tests.conftest.cli_env
    return env


_warm: _Warm | None = None


def _warm_for(loop: asyncio.AbstractEventLoop) -> _Warm | None:
    global _warm
    if os.environ.get("COMPANION_TEST_NO_FORK"):
        return None
    if _warm is None:
        _warm = _Warm(loop)
    return _warm if _warm.loop is loop else None


def _forkable(program: tuple[str, ...], env: Mapping[str, str], warm: _Warm) -> bool:
    if len(program) < 3 or program[:2] != (sys.executable, "-m"):
        return False
    keys = set(env) | set(warm.env)
    return all(env.get(k) == warm.env.get(k) for k in keys if not k.startswith(OWN_SETTINGS))


async def spawn(
    *program: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
) -> Process:
    """`asyncio.create_subprocess_exec(*program, ...)`, forked from the warm parent where
    that is the same (the module docstring says where)."""
    env = os.environ if env is None else env
    loop = asyncio.get_running_loop()
    warm = _warm_for(loop)
    streams = (stdin, stdout, stderr)
    terminal = any(
        os.isatty(s if isinstance(s, int) else s.fileno())
        for s in streams
        if s is not None and not (isinstance(s, int) and s < 0)
    )
    if warm is None or terminal or not _forkable(program, env, warm):
        return await asyncio.create_subprocess_exec(
            *program, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr
        )
    theirs, ours, opened = [], {}, []
    try:
        for target, stream in enumerate(streams):
            if stream is None:
                theirs.append(target)  # inherited, as by a new process
            elif stream == subprocess.PIPE:
                read, write = os.pipe()
                child_end, our_end = (read, write) if target == 0 else (write, read)
                theirs.append(child_end)
                opened.append(child_end)
                ours[target] = our_end
            elif stream == subprocess.DEVNULL:
                theirs.append(os.open(os.devnull, os.O_RDWR))
                opened.append(theirs[-1])
            elif stream == subprocess.STDOUT and target == 2:
                theirs.append(theirs[1])
            else:
                theirs.append(stream if isinstance(stream, int) else stream.fileno())
        pid = await warm.fork(
            program[2], list(program[3:]), env, os.fspath(cwd or os.getcwd()), theirs
        )
    except BaseException:
        for fd in ours.values():
            os.close(fd)
        raise
    finally:
        for fd in opened:
            os.close(fd)
    proc = Forked(warm, pid, ours)
    await proc._connect()
    return proc


if __name__ == "__main__":
    main()
