"""The embedded database stays up between commands, and stops once nobody has used it for a while.

    python -m bot.idle_stop DATA_DIR [SECONDS]

Starting the embedded PostgreSQL and stopping it took 2-4 s of every short command
(`companion usage`, `link`, `export`...). So a short command leaves it running, and this
process, started (detached) by the first such command, stops it after SECONDS (default
IDLE_SECONDS) in which no `companion` process used it.

Every process that uses the embedded server holds a shared lock on DATA_DIR/in-use.lock
for as long as it does (`bot.database.embedded_postgres`; the lock goes with the process,
even a killed one) and touches the file when it leaves. The stop happens under the
exclusive lock, so a command starting meanwhile waits for it and then starts the server
again. One stopper per data directory (DATA_DIR/idle-stop.lock). Standard library only:
it starts in a few milliseconds and holds no memory worth mentioning.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

IDLE_SECONDS = 600.0  # ten minutes without a command
POLL_SECONDS = 2.0
IN_USE = "in-use.lock"
GUARD = "idle-stop.lock"


def postmaster_pid(data_dir: Path) -> int | None:
    """The running embedded server's process id, None when it is not running."""
    try:
        pid = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def stop_server(data_dir: Path, pid: int, within: float = 60.0) -> None:
    """Postgres' fast shutdown (no client is connected: the caller holds the exclusive lock)."""
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and postmaster_pid(data_dir) == pid:
        time.sleep(0.1)
    # Nobody holds the server now: the list of processes using it starts empty next time.
    (data_dir / "postgres" / ".handle_pids.json").write_text(json.dumps([]))


def watch(data_dir: Path, seconds: float, poll: float = POLL_SECONDS) -> None:
    """Until the server stops: stop it once it has been unused for `seconds`, looking every
    `poll` seconds."""
    last_used = time.time()
    while True:
        time.sleep(poll)
        pid = postmaster_pid(data_dir)
        if pid is None:
            return  # stopped by someone else (a `companion run` leaving, a restart)
        with open(data_dir / IN_USE, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                last_used = time.time()  # a command is using it now
                continue
            last_used = max(last_used, os.fstat(lock.fileno()).st_mtime)
            if time.time() - last_used >= seconds:
                stop_server(data_dir, pid)
                return


def may_outlive() -> bool:
    """Whether the embedded server may outlive this command, for the next one: not when this
    is a container's or a service's main process (its parent is init, or outside the
    container: `docker run`, `docker exec`, systemd), whose leftovers are killed with it,
    Postgres without a clean shutdown."""
    return os.getpid() != 1 and os.getppid() > 1


def ensure_stopper(data_dir: Path, seconds: float = IDLE_SECONDS) -> None:
    """Start a detached stopper for `data_dir` unless one is already watching it."""
    with open(data_dir / GUARD, "a") as guard:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # one is running
    subprocess.Popen(
        [sys.executable, "-m", "bot.idle_stop", str(data_dir), str(seconds)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the terminal's process group: Ctrl-C leaves it be
        cwd=Path(__file__).resolve().parent.parent,
        close_fds=True,
    )


def main(argv: list[str]) -> int:
    data_dir = Path(argv[0])
    seconds = float(argv[1]) if len(argv) > 1 else IDLE_SECONDS
    with open(data_dir / GUARD, "a") as guard:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another stopper watches this directory
        watch(data_dir, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
