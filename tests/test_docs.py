"""The documentation names every setting the code reads: README's table and .env.example.

README sentences are taken literally by people deploying the bot; a setting that exists only
in the code is a setting nobody can find.
"""

from __future__ import annotations

import os
import re

from tests.conftest import ROOT

READ = re.compile(
    r"""(?:env\.get|_int|_text|_flag|_dollars|_number|_url)\(\s*(?:env,\s*)?["']([A-Z][A-Z0-9_]+)["']"""
)
READERS = ("bot/settings.py", "bot/embedders.py", "bot/observability.py")  # where env is read


def settings_read() -> set[str]:
    source = "".join((ROOT / path).read_text() for path in READERS)
    names = set(READ.findall(source))
    assert len(names) > 20, "the pattern no longer finds the settings"
    return names


def test_every_setting_is_in_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    missing = sorted(n for n in settings_read() if f"`{n}`" not in table)
    assert missing == [], f"README's Configuration table lacks {missing}"


def test_every_setting_is_in_the_env_example():
    example = (ROOT / "deploy" / ".env.example").read_text()
    present = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    missing = sorted(settings_read() - present)
    assert missing == [], f"deploy/.env.example lacks {missing}"


def test_discord_setup_lists_every_slash_command_the_bot_registers():
    """Issue 31: the table lacked /memory web, /memory home and /admin web."""
    import discord
    from discord import app_commands

    from adapters.discord.tree import add_commands

    tree = app_commands.CommandTree(discord.Client(intents=discord.Intents.none()))
    add_commands(tree, state=None)  # type: ignore[arg-type]  (only the names are read)
    registered = set()
    for command in tree.get_commands():
        if isinstance(command, app_commands.Group):
            registered |= {f"{command.name} {sub.name}" for sub in command.commands}
        else:
            registered.add(command.name)
    assert "memory web" in registered and "admin web" in registered

    doc = (ROOT / "deploy" / "discord-setup.md").read_text()
    table = doc.split("## 5. What members and admins get", 1)[1].split("\n## ", 1)[0]
    groups = {name.split()[0] for name in registered if " " in name}
    listed = set()
    for cell in re.findall(r"^\| `/([^`]+)`", table, re.MULTILINE):
        words = cell.split()
        listed.add(" ".join(words[:2]) if words[0] in groups else words[0])
    assert listed == registered, (
        f"missing from the table: {sorted(registered - listed)}; "
        f"not a command: {sorted(listed - registered)}"
    )


def make_dry_run(target: str, venv: str) -> str:
    import subprocess

    # As a person types it: not as a sub-make of `make test` (MAKELEVEL, MAKEFLAGS).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    run = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_make_chat_installs_what_runs_and_make_test_the_test_tools(tmp_path):
    """Issue 31: `make chat` installed playwright, mypy and ruff (230 of 718 MB) to chat, with
    -q hiding pip's progress."""
    chat = make_dry_run("chat", str(tmp_path / "venv"))
    installs = [line for line in chat.splitlines() if "pip install" in line]
    assert installs and all("[dev]" not in line for line in installs), chat
    assert all(" -q" not in line for line in installs), "pip's progress is shown"
    assert chat.rstrip().endswith("companion chat")
    for target in ("test", "lint"):
        steps = make_dry_run(target, str(tmp_path / "venv"))
        assert any("pip install" in x and "'.[dev]'" in x for x in steps.splitlines()), steps
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci  # CI installs the test tools through it
