"""`companion eval TASK`: one task against the configured endpoint, in a throwaway schema.

    companion eval locomo-recall --data locomo.json [--conversations 0-4]
    companion eval locomo-qa --data locomo.json [--limit 20] [--judge-model M]
    companion eval dmr --data locomo.json [--sessions 5]
    companion eval nested-kv --data nested_kv/ [--levels 1,2,3] [--limit 10]
    companion eval openers --data locomo.json [--sessions 3]

The model, embedder and database come from the environment as for `companion chat`. The
work happens in a new schema of that database, dropped at the end (`--keep` keeps it), so a
member's data is never touched. Progress goes to stderr (a bar on a terminal), the table to
stdout, and the whole report, every item included, to a JSON file (`--output`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bot.app import App, open_app
from bot.database import database_server, make_engine
from bot.eval.answers import answer_questions
from bot.eval.locomo import read_samples
from bot.eval.nested_kv import nested_kv
from bot.eval.openers import openers
from bot.eval.recall import locomo_recall
from bot.eval.report import Report
from bot.progress import Progress
from bot.settings import Settings
from core.errors import ConfigError
from core.llm import OpenAIChat


async def run_eval(settings: Settings, args: argparse.Namespace) -> int:
    need_model = args.task != "locomo-recall"
    if need_model:
        settings.require_model()
    settings = replace(settings, rate_limit=None)  # an eval is one busy member
    schema = f"eval_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    started, clock = datetime.now(UTC), time.perf_counter()
    async with database_server(settings.database_url, settings.data_dir) as url:
        settings = replace(settings, database_url=url)
        await _schema(url, f"CREATE SCHEMA {schema}")
        try:
            async with open_app(settings, need_model=need_model, schema=schema) as app:
                report = await _run(app, args)
        finally:
            if not args.keep:
                await _schema(url, f"DROP SCHEMA {schema} CASCADE")
    document = {
        "task": args.task,
        "model": settings.model if need_model else None,
        "judge_model": (args.judge_model or settings.model) if need_model else None,
        "embedder": settings.embedder_name,
        "data": str(args.data),
        "conversations": args.conversations,
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - clock, 1),
        **report.as_json(),
    }
    output = args.output or Path(f"eval-{args.task}.json")
    try:
        output.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    except OSError as error:
        raise ConfigError(f"cannot write {output}: {error.strerror}") from None
    print(report.table())
    for note in report.notes:
        print(f"note: {note}")
    print(f"report: {output}" + (f" (schema {schema} kept)" if args.keep else ""), file=sys.stderr)
    return 0


async def _schema(url: str, statement: str) -> None:
    engine = make_engine(url, pool_size=1)
    try:
        async with engine.begin() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def _run(app: App, args: argparse.Namespace) -> Report:
    progress = Progress(args.task)
    judge = OpenAIChat(
        app.endpoint.client(),
        args.judge_model or app.settings.model or "",
        retries=app.settings.model_retries,
    )
    if args.task == "nested-kv":
        if not args.data.is_dir():
            raise ConfigError(
                f"nested-kv reads a folder of the paper's files; {args.data} is not one"
            )
        return await nested_kv(
            app.sessions, app.engine, args.data, args.levels, args.limit or 100, progress
        )
    samples = read_samples(args.data, args.conversations)
    if args.task == "locomo-recall":
        return await locomo_recall(app.sessions, app.embedder, samples, progress)
    if args.task == "openers":
        return await openers(app.sessions, app.engine, judge, samples, progress, args.sessions or 3)
    first = (args.sessions or 5) if args.task == "dmr" else None
    return await answer_questions(
        args.task, app.sessions, app.engine, judge, samples, progress, args.limit, first
    )
