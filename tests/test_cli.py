"""The `companion` command as a person uses it: its words, output and exit status, on the test
database and the fake model.

Every run goes through `run_cli`: `bot.cli.main` in a thread of its own, because the fake
model server lives in the test's event loop and must keep answering while the command runs.
The process itself (imports, signals, restarts) is tested with real ones elsewhere.
"""

from __future__ import annotations

import asyncio
import builtins
import getpass
import io
import json
import os
import pty
import resource

import pytest

from bot.chat import BOLD, CYAN, HELP, RESET, run_chat
from core.runtime.apologies import WAITING_NOTICE
from tests.conftest import COMPANION, ROOT, Run, cli_env, run_cli
from tests.fake_openai import last

NOTHING_KNOWN = "Nothing known yet about this person."


def assert_one_line_error(run: Run) -> str:
    """A failure a person can fix: exit 2, one line on stderr, no traceback, no stdout."""
    assert run.code == 2, run
    assert "Traceback" not in run.err, run.err
    line = run.err.strip()
    assert line and "\n" not in line, f"want one line on stderr, got: {run.err!r}"
    assert run.out == "", run.out
    return line


async def test_a_piped_chat_exits_once_its_messages_have_their_vectors(fake, pg_url, schema):
    """A piped chat waits for the vectors of what it said before it exits, so a script's
    last message is found by meaning at once, not only when a later process embeds it."""
    env = cli_env(fake, pg_url, schema)
    said = "the lighthouse keeper paints the stairs blue every spring"
    run = await run_cli(env, "chat", stdin=said + "\n")
    assert run.code == 0, run
    inputs = [body["input"] for body in fake.embedding_requests]
    embedded = [text for given in inputs for text in ([given] if isinstance(given, str) else given)]
    assert said in embedded, embedded


async def test_a_piped_chat_on_a_terminal_says_it_is_starting_until_its_first_reply(
    fake, pg_url, schema
):
    """`echo hello | companion chat` typed at a terminal: stdout is the replies alone;
    stderr, the terminal, says what it is doing until the first reply, which erases it, so
    nothing of it is left. Where stderr is no terminal (a script, cron) it says nothing
    there: the other tests."""
    env = {**cli_env(fake, pg_url, schema), "TERM": "xterm"}
    main, secondary = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        *COMPANION,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=secondary,
        env=env,
        cwd=ROOT,
    )
    os.close(secondary)
    out, _ = await asyncio.wait_for(proc.communicate(b"hello\n"), 60)
    err = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal's other side is closed: all of it was read
            break
        if not chunk:
            break
        err += chunk
    os.close(main)
    assert proc.returncode == 0, err
    assert out == b"You said: hello\n"
    assert err == b"\x1b[2mstarting Companion (database, model)...\x1b[0m\r\r\x1b[K", err


async def export(env: dict, tenant: str, user: str) -> dict:
    run = await run_cli(env, "export", "--tenant", tenant, "--user", user)
    assert run.code == 0, run
    return json.loads(run.out)


async def test_piped_chat_answers_every_line_in_order(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    lines = [
        "hello",
        "",  # a blank line is not a message
        "how are you?",
        "remember that I like green tea",
        "what do you know about me?",
        "see you",
    ]
    run = await run_cli(env, "chat", stdin="\n".join(lines) + "\n")

    assert run.code == 0, run
    assert run.out.splitlines() == [
        "You said: hello",
        "You said: how are you?",
        "Got it, I'll remember that.",
        f"I know this: {NOTHING_KNOWN}",
        "I like green tea",
        "You said: see you",
    ]
    assert "Traceback" not in run.err
    assert "core_memory_append" not in run.err + run.out  # only --verbose shows calls
    # Five messages, five turns: the blank line never reached the model.
    newest = [last(body) for body in fake.chat_requests]
    user_texts = [m["content"] for m in newest if m["role"] == "user"]
    assert user_texts == [line for line in lines if line]

    # The defaults: tenant `local`, user = the login name.
    doc = await export(env, "local", getpass.getuser())
    said = [m["content"] for m in doc["messages"] if m["role"] == "user"]
    assert said == [line for line in lines if line]


async def test_user_and_tenant_select_the_agent(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)

    def chat(tenant: str, user: str, text: str):
        return run_cli(env, "chat", "--tenant", tenant, "--user", user, stdin=text + "\n")

    told = await asyncio.gather(
        chat("club", "alice", "remember that my cat is called Miso"),
        chat("club", "bob", "remember that I play chess on Sundays"),
    )
    for run in told:
        assert (run.code, run.out) == (0, "Got it, I'll remember that.\n"), run

    alice, bob, alice_elsewhere = await asyncio.gather(
        chat("club", "alice", "what do you know about me?"),
        chat("club", "bob", "what do you know about me?"),
        chat("other", "alice", "what do you know about me?"),
    )
    assert alice.code == bob.code == alice_elsewhere.code == 0
    assert alice.out == f"I know this: {NOTHING_KNOWN}\nmy cat is called Miso\n"
    assert bob.out == f"I know this: {NOTHING_KNOWN}\nI play chess on Sundays\n"
    # The same user name in another tenant is another person with another agent.
    assert alice_elsewhere.out == f"I know this: {NOTHING_KNOWN}\n"


@pytest.mark.parametrize(
    ("removed", "named", "not_named"),
    [
        (("COMPANION_MODEL",), ["COMPANION_MODEL"], ["OPENAI_API_KEY", "OPENAI_BASE_URL"]),
        (
            ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
            ["OPENAI_API_KEY", "OPENAI_BASE_URL"],
            ["COMPANION_MODEL"],
        ),
        (
            ("COMPANION_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
            ["COMPANION_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"],
            [],
        ),
    ],
    ids=["model", "endpoint", "both"],
)
async def test_missing_model_settings_are_one_line(fake, pg_url, schema, removed, named, not_named):
    env = cli_env(fake, pg_url, schema)
    for name in removed:
        del env[name]
    run = await run_cli(env, "chat", "--user", "alice", stdin="hello\n")

    line = assert_one_line_error(run)
    for name in named:
        assert name in line, line
    for name in not_named:
        assert name not in line, line
    assert fake.requests == []


async def test_only_key_or_only_base_url_is_enough(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    del env["OPENAI_API_KEY"]  # a local server needs no key
    run = await run_cli(env, "chat", "--user", "alice", stdin="hello\n")
    assert (run.code, run.out) == (0, "You said: hello\n"), run


async def test_bad_context_window_is_one_line(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema, COMPANION_CONTEXT_WINDOW="abc")
    run = await run_cli(env, "chat", "--user", "alice", stdin="hello\n")

    line = assert_one_line_error(run)
    assert "COMPANION_CONTEXT_WINDOW" in line and "abc" in line, line
    assert fake.requests == []


async def test_export_of_unknown_member_is_one_line(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    # Export needs only the database: no model settings at all.
    for name in ("COMPANION_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        del env[name]
    run = await run_cli(env, "export", "--tenant", "club", "--user", "nobody")

    line = assert_one_line_error(run)
    assert "nobody" in line and "club" in line, line


async def test_reset_without_yes_and_without_a_terminal_is_refused(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    run = await run_cli(
        env,
        "chat",
        "--tenant",
        "club",
        "--user",
        "carol",
        stdin="remember that I like green tea\n",
    )
    assert run.code == 0, run
    before = await export(env, "club", "carol")

    # Even a piped "yes" is not a confirmation: only a person at a terminal can give one.
    run = await run_cli(env, "reset", "--tenant", "club", "--user", "carol", stdin="yes\n")

    assert run.code != 0, run
    assert "Traceback" not in run.err
    line = run.err.strip()
    assert "\n" not in line and "--yes" in line, run.err
    after = await export(env, "club", "carol")
    assert after == before
    human = next(b for b in after["blocks"] if b["label"] == "human")
    assert "I like green tea" in human["value"]
    assert len(after["messages"]) == len(before["messages"]) > 0


async def test_verbose_shows_the_function_calls(fake, pg_url, schema):
    env = cli_env(fake, pg_url, schema)
    run = await run_cli(
        env,
        "chat",
        "--verbose",
        "--user",
        "alice",
        stdin="remember that I like green tea\nhi\n",
    )

    assert run.code == 0, run
    # stdout keeps only the agent's messages; the trace goes to stderr when not a terminal.
    assert run.out == "Got it, I'll remember that.\nYou said: hi\n"
    assert "core_memory_append" in run.err
    assert "I like green tea" in run.err  # the call's arguments
    assert "send_message" in run.err
    assert "Traceback" not in run.err


async def test_the_terminal_is_not_rate_limited(fake, pg_url, schema):
    """The default 30/hour guards a community from a flood, not the operator at the terminal."""
    lines = [f"line {i}" for i in range(33)]
    run = await run_cli(cli_env(fake, pg_url, schema), "chat", stdin="\n".join(lines) + "\n")
    assert run.code == 0, run.err
    assert run.out.splitlines() == [f"You said: {line}" for line in lines]


async def test_version_help_and_unexpected_failures_are_one_line(fake, pg_url, schema):
    version = await run_cli(cli_env(fake, pg_url, schema), "--version")
    assert version.code == 0 and version.out.startswith("companion ")
    bare = await run_cli(cli_env(fake, pg_url, schema), "openers")
    assert bare.code == 2 and "openers_command" not in bare.err
    down = cli_env(fake, "postgresql://nobody:secret@127.0.0.1:9/none", schema)
    for args in (("export", "--tenant", "t", "--user", "u"), ("chat",)):
        run = await run_cli(down, *args)
        assert run.code == 1 and "Traceback" not in run.err, run.err
        (line,) = run.err.strip().splitlines()
        assert line.startswith("companion: the database failed (ConnectionRefusedError")
        assert "secret" not in line and "`companion doctor` checks it" in line


@pytest.mark.parametrize(
    "args",
    [
        ("chat", "--tenant", ""),
        ("chat", "--user", "  "),
        ("export", "--tenant", "", "--user", "ana"),
        ("reset", "--tenant", "club", "--user", " ana", "--yes"),
        ("link", "--tenant", "", "--admin"),
        ("tenant", "erase", "", "--yes"),
        ("usage", "--tenant", "\t"),
    ],
)
async def test_a_blank_or_padded_tenant_or_user_is_refused(fake, pg_url, args):
    """Issue 31: `--tenant ''` created a blank tenant nobody can reach from a platform."""
    run = await run_cli(cli_env(fake, pg_url), *args)
    assert run.code == 2 and run.out == "" and "Traceback" not in run.err, run
    last_line = run.err.strip().splitlines()[-1]
    assert "id cannot be empty" in last_line or "no spaces around it" in last_line, run.err


@pytest.mark.parametrize(
    "args",
    [
        ("chat", "--user", "u" * 10_000),
        ("chat", "--tenant", "t" * 10_000),
        ("import", "export.json", "--tenant", "t" * 300, "--user", "u"),
    ],
)
async def test_an_id_too_long_to_index_is_refused(fake, pg_url, schema, args):
    """A 10,000-character id was stored until Postgres refused its index row: "the database
    failed … is it running, and is DATABASE_URL right?", exit 1."""
    run = await run_cli(cli_env(fake, pg_url, schema), *args, stdin="hello\n")
    assert run.code == 2 and run.out == "" and "Traceback" not in run.err, run
    assert "id has at most 255 characters" in run.err.strip().splitlines()[-1], run.err


@pytest.mark.parametrize("dim", ["0", "-3", "4001", "100000", "abc"])
async def test_reembed_refuses_a_dimension_pgvector_cannot_hold(fake, pg_url, dim):
    """Issue 31: `reembed --dim 0` was taken as no --dim and re-embedded everything."""
    run = await run_cli(cli_env(fake, pg_url), "reembed", "--dim", dim)
    assert run.code == 2 and "Traceback" not in run.err, run
    assert "argument --dim" in run.err.strip().splitlines()[-1]
    assert not fake.embedding_requests, "nothing was re-embedded"


async def test_piped_chat_fails_when_every_reply_was_an_apology(fake, pg_url, schema):
    """A script that pipes messages learns from the exit status that none was answered."""
    env = cli_env(fake, pg_url, schema, COMPANION_MODEL_RETRIES="0")
    fake.fail_next(500)  # the endpoint is down: both wait for it, one notice
    run = await run_cli(env, "chat", "--user", "eve", stdin="hello\nare you there?\n")
    assert run.code == 1, run
    assert run.out == WAITING_NOTICE + "\n"
    assert run.err.strip().splitlines()[-1] == (
        "companion: none of the 2 messages was answered (the log says why; `companion doctor` "
        "checks the model endpoint); they are saved"
    )
    # It is back: what waited is answered, and so is what comes now (exit 0).
    run = await run_cli(env, "chat", "--user", "eve", stdin="hello\nare you there?\n")
    assert run.code == 0 and run.out.splitlines()[-1] == "You said: are you there?", run


async def test_piped_chat_says_a_message_too_long_was_not_taken(fake, pg_url, schema):
    """A piped message over 200,000 characters is refused, not stored: the last line says
    so, exit 2 (input to fix), not "none of the 1 messages was answered … they are saved"
    with exit 1, which blamed the model and claimed it kept what it had refused."""
    env = cli_env(fake, pg_url, schema)
    run = await run_cli(env, "chat", "--user", "eve", stdin="x" * 250_000 + "\n")
    line = assert_one_line_error(run)
    assert line.startswith("companion: that message has 250,000 characters"), line
    assert not fake.requests
    run = await run_cli(env, "chat", "--user", "eve", stdin="hello\n" + "x" * 250_000 + "\n")
    assert run.code == 2 and run.out == "You said: hello\n", run
    assert "they are saved" not in run.err, run.err


async def test_a_closed_stdout_is_no_database_failure(fake, pg_url, schema):
    """`companion export … | head -0`: stdout's reader gone said "the database failed
    (BrokenPipeError …); is it running, and is DATABASE_URL right?". Now quiet, exit 1."""
    env = cli_env(fake, pg_url, schema)
    assert (await run_cli(env, "chat", "--user", "ana", stdin="hello\n")).code == 0
    reader, writer = os.pipe()
    os.close(reader)  # the reader has left before the first line
    try:
        proc = await asyncio.create_subprocess_exec(
            *COMPANION,
            "export",
            "--tenant",
            "local",
            "--user",
            "ana",
            stdout=writer,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
    finally:
        os.close(writer)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err
    assert err.decode() == "", err


async def test_an_export_that_fails_halfway_leaves_the_previous_file_whole(
    fake, pg_url, schema, tmp_path
):
    """`companion export -o FILE` over last night's export, stopped halfway (here by a file
    size limit: a full disk or a kill is the same): FILE was truncated first, then cut off,
    the previous export lost. Now it is replaced only once the new one is written whole."""
    env = cli_env(fake, pg_url, schema)
    assert (await run_cli(env, "chat", "--user", "ana", stdin="hello\n" * 30)).code == 0
    target = tmp_path / "ana.json"
    assert (
        await run_cli(env, "export", "--tenant", "local", "--user", "ana", "-o", str(target))
    ).code == 0
    previous = target.read_bytes()
    assert len(previous) > 4000

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    proc = await asyncio.create_subprocess_exec(
        *COMPANION,
        "export",
        "--tenant",
        "local",
        "--user",
        "ana",
        "-o",
        str(target),
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
        preexec_fn=limited,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err
    assert err.decode().startswith(f"companion: cannot write {target}: File too large"), err
    assert target.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ana.json"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_an_unknown_slash_command_is_answered_here_not_sent(
    engine, members, fake, monkeypatch
):
    """`/foo` in the terminal chat gets the list of commands; the model never sees it."""
    typed = iter(["/foo", "/Memroy please", "/etc/hosts is a file", "hello", "/quit"])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(typed))
    out = Terminal()
    assert await run_chat(engine, members, "local", "fay", False, Terminal(), out) == 0
    shown = out.getvalue()
    assert f"/foo is not a command here. {HELP}" in shown
    assert f"/Memroy is not a command here. {HELP}" in shown
    assert "companion> You said: hello" in shown.replace(BOLD, "").replace(CYAN, "").replace(
        RESET, ""
    )
    doc = await members.admin_export("local", "test", "fay")
    assert doc is not None
    texts = [m["content"] for m in doc["messages"] if m["role"] == "user"]
    assert texts == ["/etc/hosts is a file", "hello"], texts
    assert not any(
        "/foo" in json.dumps(body) or "Memroy" in json.dumps(body) for body in fake.requests
    )
