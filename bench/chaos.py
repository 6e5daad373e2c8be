"""Chaos: many seeded campaigns against real `companion run` processes; the invariants of each.

    python bench/chaos.py [--seeds 20] [--first 1] [--fast] [--database-url URL] [--logs DIR]

Each seed is one campaign (tests/chaos/campaign.py) on its own fresh schema of one embedded
Postgres (or of --database-url): Slack in HTTP mode and Discord (a local gateway) through
fakes, members of several tenants writing long, hostile and file-carrying messages, `import
--replace` while they talk, model errors, hangs and outages, the database restarted
(fast or immediate stop, a backend killed), settings changed from two commands at once,
platform errors and latencies, `companion run` SIGKILLed and SIGTERMed and started
again, then the checks of
tests/chaos/checks.py. The default knobs are `LONG` (tests/chaos/faults.py); --fast uses
the test suite's `FAST`.

Prints the settings, one row per seed (counts and violations by kind), then every violation
with the seed that found it and a timeline of that seed. Exit status 1 if any seed found a
violation. A seed fixes the plan and the fault rates; the processes' timing still varies, so
rerun a seed a few times to reproduce what it found (`--first S --seeds 1`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, revision, settings_block, table  # noqa: E402
from bot.database import embedded_postgres  # noqa: E402
from tests.chaos.campaign import fresh_schema, run_campaign  # noqa: E402
from tests.chaos.database import Server  # noqa: E402
from tests.chaos.faults import FAST, LONG  # noqa: E402
from tests.chaos.report import Report  # noqa: E402

COLUMNS = [
    ("items", "items"),
    ("slack acked", "slack ok"),
    ("discord sent", "discord"),
    ("discord offline", "offline"),
    ("kills", "kills"),
    ("terms", "terms"),
    ("imports", "imports"),
    ("model calls", "calls"),
    ("model faults", "faults"),
    ("summary calls", "summaries"),
    ("db restarts", "db restarts"),
    ("settings told", "settings told"),
    ("max prompt", "max prompt"),
    ("seconds", "s"),
]


def row(report: Report) -> list[object]:
    kinds = report.by_kind()
    found = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
    return [report.seed, *(report.counts.get(key, "") for key, _ in COLUMNS), found]


async def campaigns(args: argparse.Namespace, url: str) -> list[Report]:
    knobs = FAST if args.fast else LONG
    logs = Path(args.logs or tempfile.mkdtemp(prefix="companion-chaos-"))
    reports = []
    for seed in range(args.first, args.first + args.seeds):
        name = f"chaos_{seed}_{int(time.time())}"
        schema = await fresh_schema(url, name, embedded=not args.database_url)
        report = await run_campaign(seed, knobs, url, schema, logs / f"seed-{seed}")
        reports.append(report)
        print(
            f"seed {seed}: {report.by_kind() or 'no violations'} ({report.counts['seconds']} s)",
            flush=True,
        )
    return reports


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--fast", action="store_true", help="the test suite's knobs")
    parser.add_argument(
        "--database-url",
        help="a Postgres server instead of an embedded one, as a superuser (the checks read "
        "every member's rows)",
    )
    parser.add_argument("--logs", help="where process logs go (default: a temporary dir)")
    args = parser.parse_args()
    knobs = FAST if args.fast else LONG
    print(
        settings_block(
            "Settings",
            {
                "code": revision(),
                "machine": machine(),
                "seeds": f"{args.first}..{args.first + args.seeds - 1}",
                "knobs": ", ".join(f"{k}={v}" for k, v in asdict(knobs).items()),
            },
        ),
        flush=True,
    )
    if args.database_url:
        reports = await campaigns(args, args.database_url)
    else:
        with tempfile.TemporaryDirectory(prefix="companion-chaos-pg-") as data_dir:
            async with embedded_postgres(Path(data_dir)) as url:
                server = await Server.of(url)
                reports = await campaigns(args, url)
                if server is not None:  # the campaigns restart it
                    await server.stop_if_restarted()
    print()
    print(table(["seed", *(name for _, name in COLUMNS), "violations"], [row(r) for r in reports]))
    failing = [r for r in reports if r.violations]
    total = sum(len(r.violations) for r in reports)
    print(f"\n{len(failing)} of {len(reports)} seeds found violations ({total} in all)")
    for report in failing:
        print()
        print(report.describe())
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
