"""Loaded by Python at start in a `companion run` that bench/slack_http.py or bench/fanout.py
starts with --count-sql (this directory first on PYTHONPATH): counts the SQL statements and
transactions the process sends, by statement text. SIGUSR1 starts the count afresh (the
script sends it when its timed run begins); at exit the counts go to $COMPANION_SQL_COUNT.
Not part of Companion."""

import atexit
import collections
import os
import re
import signal

_OUT = os.environ.get("COMPANION_SQL_COUNT")

if _OUT:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    statements: collections.Counter[str] = collections.Counter()
    transactions = [0]

    @event.listens_for(Engine, "before_cursor_execute")
    def _statement(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
        statements[re.sub(r"\s+", " ", statement)[:150]] += 1

    @event.listens_for(Engine, "begin")
    def _begin(conn):  # noqa: ANN001
        transactions[0] += 1

    def _reset(*_: object) -> None:
        statements.clear()
        transactions[0] = 0

    def _dump() -> None:
        with open(_OUT, "w") as out:
            out.write(f"{sum(statements.values())} {transactions[0]}\n")
            for text, n in statements.most_common():
                out.write(f"{n}\t{text}\n")

    signal.signal(signal.SIGUSR1, _reset)
    atexit.register(_dump)
