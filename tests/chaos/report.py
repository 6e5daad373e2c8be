"""A campaign's verdict: the violations, the counts that show what it did, a timeline.

records(slack, discord, members)   what each member's channel was shown
verdict(campaign, ...) -> Report   every check of tests/chaos/checks.py, plus counts,
                                   the timeline and the errors the processes logged
Report.describe()                  the text a failing test or bench/chaos.py prints
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.chaos import checks
from tests.chaos.discord_api import ChaosDiscord, Gateway
from tests.chaos.plan import Item, Member
from tests.chaos.process import Processes
from tests.chaos.slack_api import ChaosSlack, EventsApi

if TYPE_CHECKING:
    from tests.chaos.campaign import Campaign

EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")  # "module.Error: text" or "Error"
SLACK_ERROR = re.compile(r"'error': '(\w+)'")
OUR_FRAME = re.compile(r'File "[^"]*/((?:core|adapters|bot)/[^"]+)", line \d+, in (\w+)')


@dataclass
class Report:
    seed: int
    violations: list[checks.Violation]
    counts: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None
    timeline: list[str] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)

    def by_kind(self) -> dict[str, int]:
        return dict(collections.Counter(v.kind for v in self.violations))

    def describe(self, per_kind: int = 8, timeline: bool = True) -> str:
        """Counts, then up to `per_kind` violations of each kind, errors logged, timeline."""
        lines = [f"seed {self.seed}: " + ", ".join(f"{k} {v}" for k, v in self.counts.items())]
        kinds = collections.defaultdict(list)
        for violation in self.violations:
            kinds[violation.kind].append(violation)
        for found in kinds.values():
            lines += [f"  {v}" for v in found[:per_kind]]
            if len(found) > per_kind:
                lines.append(f"  ... and {len(found) - per_kind} more {found[0].kind}")
        if self.errors:
            lines.append("  errors the processes logged:")
            lines += [f"    {n} x {what}" for what, n in self.errors.most_common()]
        if timeline:
            lines += ["  timeline:"] + [f"    {line}" for line in self.timeline]
        if self.workdir:
            lines.append(f"  logs: {self.workdir}")
        return "\n".join(lines)


def records(slack: ChaosSlack, discord: ChaosDiscord, members: list[Member]) -> checks.Records:
    """What each channel was shown: Slack's accepted chat.postMessage, Discord's messages."""
    posts: dict[str, list[str]] = {}
    for args in slack.called("chat.postMessage"):
        posts.setdefault(str(args.get("channel")), []).append(str(args.get("text", "")))
    for call in discord.find("POST", r"/channels/\d+/messages"):
        channel = call.path.split("/")[2]
        posts.setdefault(channel, []).append(str((call.body or {}).get("content") or ""))
    return checks.Records(posts, {m.channel: m for m in members})


def logged_errors(log: Path) -> collections.Counter[str]:
    """ERROR records with a traceback: the exception and the chain of our own functions."""
    found: collections.Counter[str] = collections.Counter()
    if not log.exists():
        return found
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        trace = record.get("exc") or ""
        if record.get("level") != "ERROR" or not trace:
            continue
        frames = OUR_FRAME.findall(trace)
        raised = [m for m in map(EXCEPTION_LINE.match, trace.splitlines()) if m]
        error = raised[-1].group(1) if raised else "?"
        code = SLACK_ERROR.search(trace)
        error += f" ({code.group(1)})" if code else ""
        chain = [name for _, name in frames]
        where = f" in {' > '.join(dict.fromkeys(chain))} ({frames[-1][0]})" if frames else ""
        found[f"{error}{where}"] += 1
    return found


def verdict(
    campaign: Campaign,
    procs: Processes,
    stored: checks.Stored,
    shown: checks.Records,
    gateway: Gateway,
    events: EventsApi,
) -> Report:
    plan, ledger = campaign.plan, campaign.ledger
    items = plan.items
    checker = checks.Checker(items, shown, stored, _when(campaign, procs))
    found = checker.run()
    found += checks.model_violations(ledger)
    agents = {tenant_user: agent for agent, tenant_user in stored.agents.items()}
    agent_of = {m.mid: agents.get((m.tenant, m.user), -1) for m in plan.members}
    excused: collections.Counter[str] = collections.Counter()
    usage, cut = checks.usage_violations(procs.generations, ledger, stored, agent_of, excused)
    found += usage
    found += checks.process_violations(procs.generations, procs.imports, campaign.restarted)
    runs = [g for g in procs.generations if g.name != "sweep"]
    calls = ledger.calls
    on = collections.Counter(
        (i.member.platform, "acked" if i.acked_at else "tried" if i.tried else "unsent")
        for i in items
    )
    counts = {
        "items": len(items),
        "slack acked": on["slack", "acked"],
        "slack never acked": on["slack", "tried"],
        "discord sent": on["discord", "acked"],
        "discord offline": sum(1 for i in items if i.offline),
        "imports": len(procs.imports),
        "erased by import": checker.erased,
        "kills": sum(1 for g in runs if g.ended_by == "SIGKILL"),
        "terms": sum(1 for g in runs if g.ended_by == "SIGTERM"),
        "resumes": gateway.resumes,
        "model calls": len(calls),
        "model faults": sum(1 for c in calls if c.fault),
        "summary calls": sum(1 for c in calls if c.summary and c.billed),
        "max prompt": max((c.prompt_tokens for c in calls), default=0),
        "billed to cut turns": cut,
        "platform faults": sum(
            n for what, n in campaign.faults.injected.items() if not what.startswith("model")
        ),
        "slack answers": dict(events.outcomes),
        "db restarts": len(campaign.restarted),
        "settings races": len(plan.races),
        "settings told": sum(len(r.told) for r in plan.races),
        "out of order, a send failed or held": checker.reordered,
        # How often the allowances for a restart of the database were needed
        "starts stopped by a restart": sum(1 for g in runs if g.ended_by == "exit"),
        "imports stopped by a restart": sum(
            1 for r in procs.imports if r.returncode and "the database failed" in r.stderr
        ),
        **excused,
    }
    result = Report(plan.seed, found, counts, campaign.workdir)
    result.timeline = _timeline(campaign, procs, gateway)
    for gen in procs.generations:
        result.errors.update(logged_errors(gen.log))
    return result


def _timeline(campaign: Campaign, procs: Processes, gateway: Gateway) -> list[str]:
    """What happened when, in seconds from the start of the traffic."""
    moments = list(gateway.log)
    for gen in procs.generations:
        moments.append((gen.started, f"{gen.name} spawned"))
        if gen.ready_at:
            moments.append((gen.ready_at, f"{gen.name} {'ready' if gen.ready else 'NOT ready'}"))
        if gen.ended_at:
            moments.append((gen.ended_at, f"{gen.name} {gen.ended_by}"))
    for run in procs.imports:
        moments.append((run.started, f"import --replace {run.member} started"))
        moments.append((run.ended, f"import --replace {run.member} exited {run.returncode}"))
    t0, plan = campaign.t0, campaign.plan
    moments += [(t0 + at, "model outage starts") for at in plan.outages]
    moments += [(t0 + at, "gateway drop / RECONNECT") for at in plan.drops]
    for began, ended, mode in campaign.restarted:
        moments.append((began, f"database restart ({mode}) begins"))
        moments.append((ended, "database accepts connections again"))
    for race in plan.races:
        told = ", ".join(sorted(race.told)) or "nothing"
        moments.append((t0 + race.at, f"settings race {race.member.mid} (told: {told})"))
    return [f"{t - t0:7.2f}s  {what}" for t, what in sorted(moments, key=lambda m: m[0])]


def _when(campaign: Campaign, procs: Processes) -> Callable[[Item], str]:
    """When an item was acknowledged, its scene, and what the bot process did around it."""
    t0 = campaign.t0

    def when(item: Item) -> str:
        assert item.acked_at is not None
        notes = [f"acked at {item.acked_at - t0:.2f}s"]
        notes += [f"scene: {item.scene}"] if item.scene else []
        for gen in procs.generations:
            if gen.started <= item.acked_at <= (gen.ended_at or float("inf")) + 0.5:
                end = f"{gen.ended_by} at {gen.ended_at - t0:.2f}s" if gen.ended_at else "running"
                notes.append(f"{gen.name} up {gen.ready_at - t0:.2f}s, {end}")
        for run in procs.imports:
            if run.member == item.member.mid:
                notes.append(f"import {run.started - t0:.2f}-{run.ended - t0:.2f}s")
        return "; ".join(notes)

    return when
