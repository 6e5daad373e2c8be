"""Where a process's CPU went: a py-spy raw profile summed by function and by package.

    python bench/profile.py FILE [--top 40] [--under FUNCTION]

FILE is what `--py-spy FILE` of bench/slack_http.py or bench/fanout.py leaves: py-spy's
raw (collapsed) stacks, one line per distinct stack with its count of samples, sampled
only while the process held the GIL (CPU in Python or in C called from it). Printed:

- by package: each sample counted once for the innermost frame's package (sqlalchemy,
  asyncpg, slack_bolt, pydantic, tiktoken, our own core/adapters/bot modules...): where
  the CPU itself was spent;
- by function, inclusive: the share of samples with the function anywhere on the stack
  (what calling it costs, everything below it included), and self: innermost only.

--under FUNCTION keeps only the stacks through a function whose name contains that text.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
OURS = ("core/", "adapters/", "bot/", "tests/", "bench/")


def package(file: str) -> str:
    """site-packages/sqlalchemy/orm/x.py -> sqlalchemy; core/memory/turn.py -> core/memory."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    for ours in OURS:
        if ours in file:
            tail = ours + file.split(ours, 1)[1]
            return "/".join(tail.split("/")[:2]).removesuffix(".py")
    if "/lib/python3" in file:
        return "stdlib:" + file.rsplit("/lib/python3", 1)[1].split("/", 1)[1].split("/", 1)[0]
    return file.split("/", 1)[0] or "?"


def parse(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        frames_text, count = line.rsplit(" ", 1)
        frames = []
        for part in frames_text.split(";")[1:]:  # the first is the process or thread
            found = FRAME.match(part)
            if found:
                frames.append((found["name"], found["file"]))
        stacks.append((frames, int(count)))
    return stacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--under", help="only stacks through a function naming this")
    args = parser.parse_args()
    stacks = parse(args.file)
    if args.under:
        stacks = [(f, n) for f, n in stacks if any(args.under in name for name, _ in f)]
    total = sum(n for _, n in stacks) or 1
    by_package: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, n in stacks:
        if not frames:
            continue
        by_package[package(frames[-1][1])] += n
        own[f"{frames[-1][0]} ({frames[-1][1]})"] += n
        for key in {f"{name} ({file})" for name, file in frames}:
            inclusive[key] += n
    print(f"{total} samples{' under ' + args.under if args.under else ''}\n")
    print("by package (innermost frame)")
    for name, n in by_package.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print("\nby function, inclusive")
    for name, n in inclusive.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print("\nby function, self")
    for name, n in own.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
