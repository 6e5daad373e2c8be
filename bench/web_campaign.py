"""The inspector's hostile-input campaign, run longer than the suite runs it.

    python bench/web_campaign.py [--examples 200] [--seed N]

Runs tests/test_web_campaign.py's campaign (tests/web_campaign.py: every route of the
inspector, each round a request to each, with hostile numbers, NUL, lone surrogates, long
text, odd charsets and repeated fields) for `--examples` rounds instead of the suite's 15,
with the seed given (`--seed`) or a new one, printed so a finding can be run again.
Prints the settings, the answers by status and the time; exit status 1 when the campaign
found a 5xx, a refused request that changed something, or a refused block edit that lost
its text (pytest shows the request, shrunk).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine, revision, settings_block  # noqa: E402

TEST = "test_no_hostile_request_gets_a_5xx_or_changes_what_it_was_refused"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="rounds of every route")
    parser.add_argument("--seed", type=int, default=None, help="default: a new one, printed")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(
        settings_block(
            "web campaign",
            {"rounds": args.examples, "seed": seed, "machine": machine(), "code": revision()},
        )
    )
    env = {
        **os.environ,
        "COMPANION_WEB_EXAMPLES": str(args.examples),
        "COMPANION_WEB_SEED": str(seed),
    }
    started = time.monotonic()
    test = f"tests/test_web_campaign.py::{TEST}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env=env,
        check=False,
    )
    print(f"{args.examples} rounds in {time.monotonic() - started:.0f} s, seed {seed}")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
