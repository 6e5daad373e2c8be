"""The built-in embedder's CPU per text: float arithmetic (the published file) against int8.

    python bench/embedder_cpu.py [--texts 320] [--rounds 3]

Two kinds of text: the Slack bench's ("Hello there, this is message [tag] about my week."
and its echo, about 19 tokens each) and chat lines of one to three sentences
(`bench.common.chat_line`). Each is embedded through `LocalEmbedder.embed_now` 16 texts a
call (as the embedding worker's batches) and one text a call (as a search's query), in each
arithmetic; CPU = process time (every thread) per text, the best of --rounds. Also printed:
the int8 vectors' cosine to the float ones (mean and lowest), and to the vector each text
gets alone (int8 quantizes a batch's activations on one scale). Numbers only, no assertion.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.common import chat_line, machine, revision, settings_block, table, yardstick
from core.local_embedder import LocalEmbedder


def cpu_per_text(embedder: LocalEmbedder, texts: list[str], per_call: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for start in range(0, len(texts), per_call):
            embedder.embed_now(texts[start : start + per_call])
        best = min(best, (time.process_time() - started) / len(texts) * 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(7)
    kinds = {
        "Slack bench": [
            ("You said: " if i % 2 else "")
            + f"Hello there, this is message [{i:05d}] about my week."
            for i in range(args.texts)
        ],
        "chat lines": [chat_line(rng) for _ in range(args.texts)],
    }
    print(settings_block("Settings", {"machine": machine(), "code": revision()}))
    with tempfile.TemporaryDirectory() as cache:
        models = {
            "float": LocalEmbedder(int8=False),
            "int8": LocalEmbedder(cache=Path(cache)),
        }
        for embedder in models.values():
            embedder.embed_now(["warm up"])
        stick = yardstick()
        rows, close = [], []
        for kind, texts in kinds.items():
            for name, embedder in models.items():
                rows.append(
                    [
                        f"{kind}, {name}",
                        cpu_per_text(embedder, texts, 16, args.rounds),
                        cpu_per_text(embedder, texts, 1, args.rounds),
                    ]
                )
            batched = [np.array(models[n].embed_now(texts)) for n in models]
            alone = np.array([models["int8"].embed_now([t])[0] for t in texts])
            to_float = (batched[0] * batched[1]).sum(axis=1)
            to_alone = (batched[1] * alone).sum(axis=1)
            close.append([kind, to_float.mean(), to_float.min(), to_alone.mean(), to_alone.min()])
        stick_end = yardstick()
    print()
    print(table(["texts, arithmetic", "ms CPU a text, 16 a call", "1 a call"], rows))
    print()
    headers = ["texts", "int8 to float: mean", "lowest", "in a batch to alone: mean", "lowest"]
    print(table(headers, [[r[0], *(f"{v:.4f}" for v in r[1:])] for r in close]))
    print(f"\nCPU yardstick at start / end, ms: {stick:.1f} / {stick_end:.1f}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
