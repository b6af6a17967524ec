"""What PostgreSQL's backends do while a benchmark runs, sampled from ``pg_stat_activity``.

A ``WaitSampler`` reads ``pg_stat_activity`` in a thread of its own and counts each busy backend
whose statement names a schema once per sample (the step part, ``bench.step_throughput``, whose
workers are processes of their own), by what it waits on and by the kind of statement it runs
(``statement_kind``). What a backend waits on: ``CPU`` when nothing (running, or ready to run and
waiting for a core), its wait event (``IO WALSync``: its commit's WAL flush; ``Lock relation``: a
table lock), or ``idle in transaction`` (the client has not sent the next statement of an open
transaction).

A count divided by the samples is the mean number of backends in that state: the share of the
time, summed over them (``waits_table``). The sampler's own queries take CPU of the machine (its
backend and its thread): compare its figures between runs, not as absolute times.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from typing import Any

import psycopg

WaitKey = tuple[str, str]
"""``(what the backend waits on, statement_kind)``."""

_QUALIFIER = re.compile(r'"[^"]*"\.')
_SPACE = re.compile(r"\s+")
_FUNCTION_CALL = re.compile(r"\bFROM\s+(longhaul_\w+)\(")
KIND_LENGTH = 48


def statement_kind(query: str) -> str:
    """``query`` without its schema qualifiers and line breaks, cut to ``KIND_LENGTH`` characters;
    a ``SELECT … FROM longhaul_…(…)`` is named by its function (``longhaul_append(…)``: the append)."""
    text = _SPACE.sub(" ", _QUALIFIER.sub("", query)).strip()
    call = _FUNCTION_CALL.search(text)
    if text.upper().startswith("SELECT") and call is not None:
        return f"{call.group(1)}(…)"
    return text[:KIND_LENGTH]


BUSY = (  # what each waits on: CPU, "<wait_event_type> <wait_event>", or the state of one not running
    "SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ' ' || wait_event, 'CPU')"
    " ELSE state END, query FROM pg_stat_activity"
    " WHERE state NOT IN ('idle', 'disabled') AND pid <> pg_backend_pid()"
    " AND (strpos(query, %s) > 0 OR query IN ('COMMIT', 'BEGIN', 'ROLLBACK', 'SELECT 1'))"
)  # a transaction's last statement names no table


class WaitSampler:
    """Counts, every ``every_s`` until the block ends, what each busy backend whose statement names
    ``schema`` waits on."""

    def __init__(self, database_url: str, *, schema: str, every_s: float) -> None:
        self.counts: collections.Counter[WaitKey] = collections.Counter()
        self.samples = 0
        self._schema = schema
        self._every_s = every_s
        self._conn = psycopg.connect(database_url, autocommit=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="pg-waits", daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop sampling (the counts stay) and close the connection."""
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for waited, text in self._conn.execute(BUSY, (self._schema,)).fetchall():
                self.counts[(waited, statement_kind(text))] += 1
            self.samples += 1
            time.sleep(self._every_s)


def waits_table(counts: collections.Counter[WaitKey], samples: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` most sampled (wait, statement) pairs: their share of the time, summed over the
    backends."""
    if samples == 0:
        return []
    return [
        {"wait": wait, "statement": kind, "share": round(count / samples, 4)}
        for (wait, kind), count in counts.most_common(top)
    ]
