"""`companion eval`: each task's mechanics, against the fake model on tiny synthetic data.

The data in tests/data are written for these tests in LoCoMo's and the paper's file formats
(not the real data sets). The fake model plays an agent that searches its memory and a
judge that compares; what is checked is what a user of the command sees: an exit status, a
table, a JSON report with every item, progress on stderr, and no schema left behind.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, text

from bot.cli import _parser
from bot.database import make_engine
from bot.eval.locomo import EvidenceLog, parse_evidence, read_samples
from core.errors import ConfigError
from tests.conftest import ROOT, cli_env, run_cli
from tests.fake_openai import (
    calls,
    completion,
    default_brain,
    is_summary_request,
    last,
    last_user_text,
    say,
    summary_of,
    tool_call,
)

DATA = ROOT / "tests" / "data"
LOCOMO = DATA / "locomo_tiny.json"
KV_KEY = re.compile(r"the following key: ([0-9a-f-]{36})")


def _searched_for(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        for call in message.get("tool_calls") or []:
            return json.loads(call["function"]["arguments"])["query"]
    return ""


def eval_brain(body: dict[str, Any]) -> dict[str, Any]:
    """An agent that searches before answering, and a judge that checks for the answer."""
    prompt = str(last(body).get("content") or "")
    if "Gold answer:" in prompt:
        answer = prompt.split("Gold answer: ", 1)[1].split("\n", 1)[0].lower()
        reply = prompt.split("Reply: ", 1)[1].split("\nIs the reply", 1)[0].lower()
        return completion("CORRECT" if answer in reply else "WRONG")
    if "GROUNDED or NOT" in prompt:
        return completion("GROUNDED" if "Rex" in prompt.split("with:", 1)[1] else "NOT")
    if is_summary_request(body):
        return summary_of(body)
    newest = last(body)
    question = last_user_text(body)
    key = KV_KEY.search(question)
    if newest.get("role") == "tool":
        if not key:
            return say("From memory: " + newest["content"])
        wanted = _searched_for(body)
        found = re.search(rf'"{wanted}": "([0-9a-f-]{{36}})"', newest["content"])
        if found:  # the value may be a key itself: look it up too
            return calls(tool_call("archival_memory_search", query=found.group(1)))
        return say(wanted)
    if key:
        return calls(tool_call("archival_memory_search", query=key.group(1)))
    if question.endswith("?"):
        return calls(tool_call("conversation_search", query=question))
    return default_brain(body)


async def run_eval(fake, pg_url, tmp_path: Path, *args: str):
    fake.brain = eval_brain
    output = tmp_path / "report.json"
    run = await run_cli(cli_env(fake, pg_url), "eval", *args, "--output", str(output))
    assert run.code == 0, run.err
    return run, json.loads(output.read_text())


async def no_eval_schema_left(pg_url) -> bool:
    engine = make_engine(pg_url)
    async with engine.connect() as conn:
        left = await conn.scalar(
            text("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'eval\\_%'")
        )
    await engine.dispose()
    return left == 0


async def test_locomo_recall_reports_recall_by_category(fake, pg_url, tmp_path):
    run, report = await run_eval(fake, pg_url, tmp_path, "locomo-recall", "--data", str(LOCOMO))
    assert report["task"] == "locomo-recall" and report["model"] is None  # no chat model used
    assert report["summary"]["questions"] == 8  # 2 conversations, 4 non-adversarial each
    # tiny conversations: nearly everything is found (the fake's 16 hashed dimensions put
    # "we adopted a puppy" out of reach of "What course did my puppy finish?" in one of them)
    assert report["summary"]["recall@25"] >= 90.0
    puppy = [i for i in report["items"] if i["question"] == "What did Ana name her puppy?"]
    assert puppy[0]["gold"] == ["D1:3"] and "D1:3" in puppy[0]["found"][:5]
    # the results each search reported, and the pages the model would be told of and read
    assert puppy[0]["pages read"] == 1 and puppy[0]["results"] >= 1
    assert 1 <= report["summary"]["pages read"] <= report["summary"]["pages told"]
    lines = run.out.splitlines()
    assert lines[0].split() == ["questions", "n", "R@5", "%", "R@10", "%", "R@25", "%"]
    assert any(line.startswith("all but adversarial") for line in lines)
    assert "locomo-recall: 10 of 10 (100%)" in run.err  # progress, plain when not a terminal
    assert await no_eval_schema_left(pg_url)


async def _members_messages(url: str) -> int:
    engine = make_engine(url, pool_size=1)
    async with engine.connect() as conn:
        count = await conn.scalar(text("SELECT count(*) FROM public.messages"))
    await engine.dispose()
    return int(count or 0)


async def test_eval_leaves_a_database_whose_members_are_in_public_alone(fake, pg_url, tmp_path):
    """Members in `public`, as by default: the eval's schema, whose search path goes on to
    public (pgvector's types), read public's alembic_version as its own, was never
    migrated, and the eval ran in the members' tables: its conversations stored among
    theirs, kept after the schema was dropped, and a second run failed (KeyError)."""
    name = f"members_{uuid.uuid4().hex[:8]}"
    admin = make_engine(pg_url, pool_size=1)
    async with admin.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f"CREATE DATABASE {name}"))
    url = make_url(pg_url).set(database=name).render_as_string(False)
    try:
        env = {**cli_env(fake, pg_url), "DATABASE_URL": url}
        run = await run_cli(env, "chat", "--user", "ana", stdin="remember that I keep bees\n")
        assert run.code == 0, run
        before = await _members_messages(url)
        for attempt in range(2):
            output = tmp_path / f"report-{attempt}.json"
            args = ("eval", "locomo-recall", "--data", str(LOCOMO), "--output", str(output))
            run = await run_cli(env, *args)
            assert run.code == 0, run.err
            assert await _members_messages(url) == before, "the eval wrote among the members"
    finally:
        async with admin.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        await admin.dispose()


@pytest.mark.parametrize("spec", ["5-2", "a-b", "-1", "1,", "0-99999999999999"])
def test_conversations_that_name_no_position_are_one_clear_error(spec):
    """Each was "unexpected ValueError" (exit 1), and a wide range was made into a list
    before it was checked: "0-99999999999999" ate memory instead of saying the file has 2."""
    with pytest.raises(ConfigError) as error:
        read_samples(LOCOMO, spec)
    assert "--conversations" in str(error.value) or "has 2 conversations" in str(error.value)


@pytest.mark.parametrize("option", [("--limit", "-1"), ("--limit", "0"), ("--sessions", "-3")])
def test_eval_counts_below_one_are_refused(option, capsys):
    """--limit -1 ran every question but the last of each conversation, and 0 ran 100."""
    with pytest.raises(SystemExit) as exit:
        _parser().parse_args(["eval", "dmr", "--data", "x", *option])
    assert exit.value.code == 2
    assert f"argument {option[0]}: 1 or more" in capsys.readouterr().err


def test_malformed_evidence_ids_are_repaired_or_reported():
    known = {"D8:6", "D9:17", "D11:26", "D30:5"}
    log = EvidenceLog()
    raw = ["D8:6; D9:17", "D:11:26", "D30:05", "D", "D10:19"]
    assert parse_evidence(raw, known, log) == known
    assert log.repaired == [
        "'D8:6; D9:17' -> D8:6, D9:17",
        "'D:11:26' -> D11:26",
        "'D30:05' -> D30:5",
    ]
    assert log.unparseable == ["D"] and log.unknown == ["D10:19"] and log.clean == 1


async def test_locomo_qa_asks_the_agent_and_the_judge_scores(fake, pg_url, tmp_path):
    run, report = await run_eval(
        fake,
        pg_url,
        tmp_path,
        "locomo-qa",
        "--data",
        str(LOCOMO),
        "--conversations",
        "0",
        "--judge-model",
        "judge-1",
    )
    assert report["summary"]["questions"] == 4  # the adversarial question has no answer
    assert report["judge_model"] == "judge-1"
    judged = [r for r in fake.requests if r["model"] == "judge-1"]
    assert len(judged) == 4
    puppy = report["items"][0]
    assert puppy["functions"][0] == "conversation_search" and puppy["correct"] is True
    assert "Rex" in puppy["reply"]
    assert report["summary"]["searched"] == 100.0
    assert re.search(r"^all\s+4\s+\d+\.\d\s+100\.0$", run.out, re.M)
    # every question met the same memory: no question's messages stayed behind
    second = next(r for r in fake.chat_requests if "When did Ana go" in last_user_text(r))
    assert "What did Ana name her puppy?" not in json.dumps(second["messages"])


async def test_dmr_imports_the_first_sessions_and_asks_about_them(fake, pg_url, tmp_path):
    _, report = await run_eval(
        fake,
        pg_url,
        tmp_path,
        "dmr",
        "--data",
        str(LOCOMO),
        "--conversations",
        "1",
        "--sessions",
        "2",
    )
    questions = [i["question"] for i in report["items"]]
    assert questions == ["What did Mia name her puppy?", "When did Mia go to Oslo?"]
    assert report["items"][0]["correct"] is True


async def test_nested_kv_follows_the_chain_in_archival_memory(fake, pg_url, tmp_path):
    run, report = await run_eval(
        fake, pg_url, tmp_path, "nested-kv", "--data", str(DATA / "nested_kv"), "--levels", "1,2"
    )
    assert [(i["levels"], i["correct"]) for i in report["items"]] == [
        (1, True),
        (1, True),
        (2, True),
        (2, True),
    ]
    assert report["summary"] == {"accuracy": 100.0, "cases": 4}
    assert run.out.splitlines()[0].split() == ["nesting", "levels", "n", "correct", "%"]


async def test_openers_are_judged_grounded_in_the_working_context(fake, pg_url, tmp_path):
    _, report = await run_eval(fake, pg_url, tmp_path, "openers", "--data", str(LOCOMO))
    first = report["items"][0]
    assert first["sent"] and "Rex" in first["opener"] and first["grounded"]
    assert first["overlap"] > 0.3
    assert report["summary"]["conversations"] == 2


async def test_missing_data_is_one_clear_line(fake, pg_url, tmp_path):
    env = cli_env(fake, pg_url)
    run = await run_cli(env, "eval", "locomo-recall", "--data", str(tmp_path / "nope.json"))
    assert run.code == 2 and "Traceback" not in run.err
    assert run.err.strip().startswith("companion: cannot read LoCoMo data from ")
    assert await no_eval_schema_left(pg_url)
