"""Run `UV pip install ARGS...` told the package index pip is configured with.

    python deploy/uv_pip_install.py UV ARGS...

`make chat` installs with uv, which does not read pip's configuration. Where pip has an
index of its own (a mirror or proxy, a directory of wheels, a constraints file: pip.conf or
PIP_* variables, as `pip config list` shows them), uv gets the same as options of its own:
pip's index-url, extra-index-url, find-links, no-index, trusted-host and constraint. pip's
precedence holds: a PIP_* variable over the `install` section over the `global` one. With
more than one index, uv picks as pip does (the best version on any of them), not its own way
(the first index that has the package), so both install the same versions.
Standard library only, since it runs before anything is installed. uv's exit status is
this script's.
"""

from __future__ import annotations

import ast
import subprocess
import sys

# pip's option -> uv's option of the same meaning (each value of a list becomes one option)
UV_OPTION = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "trusted-host": "--allow-insecure-host",
    "constraint": "--constraint",
}
SCOPES = (":env:", "install", "global")  # the first that sets an option wins, as in pip
TRUE = {"1", "true", "yes", "on"}


def pip_config() -> dict[str, str]:
    """`pip config list` as {"scope.option": value}; empty when pip cannot say."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    config = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key] = str(ast.literal_eval(value))  # pip prints each value's repr
    return config


def uv_options(config: dict[str, str]) -> list[str]:
    """uv's options for the index settings in `config` (`pip config list`'s entries)."""

    def setting(option: str) -> str | None:
        return next(
            (config[f"{scope}.{option}"] for scope in SCOPES if f"{scope}.{option}" in config), None
        )

    options = []
    for option, uv_option in UV_OPTION.items():
        for value in (setting(option) or "").split():
            options += [uv_option, value]
    if "--extra-index-url" in options:
        options += ["--index-strategy", "unsafe-best-match"]
    if (setting("no-index") or "").lower() in TRUE:
        options.append("--no-index")
    return options


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python deploy/uv_pip_install.py UV ARGS...", file=sys.stderr)
        return 2
    uv, *args = argv[1:]
    return subprocess.run(
        [uv, "pip", "install", *uv_options(pip_config()), *args], check=False
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
