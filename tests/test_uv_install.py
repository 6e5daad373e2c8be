"""deploy/uv_pip_install.py: `make chat` installs with uv, told the index pip is configured
with. On this machine pip reads a directory of wheels, two local indexes and a constraints
file; uv, which reads none of pip's configuration, used to be skipped for pip (60-84 s to a
first reply against 18-39 s)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "deploy" / "uv_pip_install.py"
# The interpreter `make chat` runs it with (PY, python3), which has a pip of its own: the
# test venv has none (made without pip, as `make dev` makes it).
PYTHON = shutil.which("python3") or sys.executable


def load_script():
    spec = importlib.util.spec_from_file_location("uv_pip_install", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_uv_is_told_the_index_pip_reads_from_its_environment_and_keeps_uvs_exit_status(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\nexit 3\n')
    uv.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,  # none of this machine's pip.conf
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "PIP_EXTRA_INDEX_URL": "file:///srv/a/simple file:///srv/b/simple",
        "PIP_FIND_LINKS": "/srv/wheels",
    }
    run = subprocess.run(
        [PYTHON, str(SCRIPT), str(uv), "--python", "/venv/bin/python", "-e", "."],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 3, run.stderr
    assert run.stdout.splitlines() == [
        "pip",
        "install",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///srv/a/simple",
        "--extra-index-url",
        "file:///srv/b/simple",
        "--find-links",
        "/srv/wheels",
        "--index-strategy",  # pip's choice among indexes: the best version on any
        "unsafe-best-match",
        "--python",
        "/venv/bin/python",
        "-e",
        ".",
    ]


def test_pips_precedence_holds_a_variable_over_install_over_global():
    options = load_script().uv_options(
        {
            "global.index-url": "https://global.example/simple",
            "install.index-url": "https://install.example/simple",
            ":env:.index-url": "https://env.example/simple",
            "global.find-links": "/w1 /w2",
            "install.constraint": "/etc/constraints.txt",
            "global.trusted-host": "mirror.example",
            "install.no-index": "true",
            "global.cert": "/etc/ssl/ca.pem",  # not an index setting: uv is not told
        }
    )
    assert options == [
        "--index-url",
        "https://env.example/simple",
        "--find-links",
        "/w1",
        "--find-links",
        "/w2",
        "--allow-insecure-host",
        "mirror.example",
        "--constraint",
        "/etc/constraints.txt",
        "--no-index",
    ]


def test_no_configuration_means_no_options():
    assert load_script().uv_options({}) == []
