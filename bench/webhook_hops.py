"""Where commit -> webhook goes, hop by hop: timestamps the benchmark takes outside the hot code.

``install`` puts a row trigger on the run's own delivery table (the benchmark's schema, dropped
after the run) that notes ``clock_timestamp()`` when the intake's insert of a delivery runs and
when a finish changes its state. With what the delivery record keeps anyway (``created_at``:
the intake's clock as it starts recording; each attempt's ``started_at`` and ``duration_ms``)
and what the benchmark sees itself (the commit, the relay's message on NATS, the POST at the
receiver), ``breakdown`` splits each task's commit -> COMPLETED delivered into its hops, and
says which hops the slowest tasks (those at or above the p99) spent their time in.

The trigger costs the intake's insert and the finish a row insert each, in the transaction they
already run: the figures of a run with ``--hops`` are not the headline's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from bench.common import percentile

HOPS = (
    ("commit -> NATS (the relay: read the log, publish, stream ack)", "commit", "nats"),
    ("NATS -> intake starts recording (pull, configs)", "nats", "created"),
    ("intake records: its insert runs", "created", "inserted"),
    ("insert -> WORKING POST starts (commit, claim, hand-over)", "inserted_w", "started_w"),
    ("WORKING POST -> its 2xx", "started_w", "ok_w"),
    ("WORKING 2xx -> COMPLETED POST starts (the lane's next)", "ok_w", "started"),
    ("COMPLETED POST starts -> at the receiver", "started", "received"),
    ("at the receiver -> 2xx back at the dispatcher", "received", "ok"),
)
"""The hops of the COMPLETED webhook, in path order: (name, from, to)."""
AFTER = ("2xx -> finish recorded (behind the POST)", "ok", "finished")


def install(database_url: str, schema: str) -> None:
    """The trigger and its table, in ``schema`` (whose delivery table exists: migrated)."""
    s = sql.Identifier(schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {}.bench_hops (delivery_id bigint, hop text, at timestamptz)").format(s)
        )
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.bench_hop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF TG_OP = 'INSERT' THEN"
                "  INSERT INTO {s}.bench_hops VALUES (NEW.id, 'inserted', clock_timestamp());"
                " ELSIF NEW.state IS DISTINCT FROM OLD.state THEN"
                "  INSERT INTO {s}.bench_hops VALUES (NEW.id, 'finished', clock_timestamp());"
                " END IF; RETURN NULL; END $$"
            ).format(s=s)
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER bench_hop AFTER INSERT OR UPDATE ON {s}.longhaul_deliveries"
                " FOR EACH ROW EXECUTE FUNCTION {s}.bench_hop()"
            ).format(s=s)
        )


def read(database_url: str, schema: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per (task id, event type) of each delivery: its timestamps (epoch seconds)."""
    s = sql.Identifier(schema)
    query = sql.SQL(
        "SELECT d.task_id::text, d.event_type, extract(epoch FROM d.created_at),"
        " extract(epoch FROM a.started_at), a.duration_ms,"
        " (SELECT extract(epoch FROM min(h.at)) FROM {s}.bench_hops h WHERE h.delivery_id = d.id"
        "  AND h.hop = 'inserted'),"
        " (SELECT extract(epoch FROM min(h.at)) FROM {s}.bench_hops h WHERE h.delivery_id = d.id"
        "  AND h.hop = 'finished')"
        " FROM {s}.longhaul_deliveries d JOIN {s}.longhaul_delivery_attempts a"
        " ON a.delivery_id = d.id AND a.attempt = 1"
    ).format(s=s)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(query).fetchall()
    found = {}
    for task, kind, created, started, duration_ms, inserted, finished in rows:
        found[(task, kind)] = {
            "created": float(created),
            "started": float(started),
            "ok": float(started) + float(duration_ms) / 1000,
            "inserted": float(inserted) if inserted is not None else float("nan"),
            "finished": float(finished) if finished is not None else float("nan"),
        }
    return found


def breakdown(
    committed: dict[str, float],
    times: dict[tuple[str, str], float],
    rows: dict[tuple[str, str], dict[str, float]],
    warm_after: float,
) -> dict[str, Any]:
    """Each hop's p50/p99 over the warm tasks, and its mean share of the slowest 1 %."""
    per_task: dict[str, dict[str, float]] = {}
    for task, at in committed.items():
        working, completed = rows.get((task, "LeaseGranted")), rows.get((task, "Completed"))
        received = times.get((task, "TASK_STATE_COMPLETED"))
        nats_at = times.get((task, "Completed"))
        if at < warm_after or working is None or completed is None or received is None or nats_at is None:
            continue
        per_task[task] = {
            "commit": at,
            "nats": nats_at,
            **completed,
            "received": received,
            "inserted_w": working["inserted"],
            "started_w": working["started"],
            "ok_w": working["ok"],
        }
    totals = {t: p["ok"] - p["commit"] for t, p in per_task.items()}
    if not totals:
        return {}
    cut = percentile(list(totals.values()), 0.99)
    slowest = [t for t, total in totals.items() if total >= cut]
    hops: dict[str, Any] = {}
    for name, start, end in (*HOPS, AFTER):
        values = [(p[end] - p[start]) * 1000 for p in per_task.values()]
        hops[name] = {
            "p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(percentile(values, 0.99), 2),
            "slowest_1pct_mean_ms": round(
                _mean([(per_task[t][end] - per_task[t][start]) * 1000 for t in slowest]), 2
            ),
        }
    hops["commit -> 2xx at the dispatcher (the sum)"] = {
        "p50_ms": round(statistics.median(totals.values()) * 1000, 2),
        "p99_ms": round(cut * 1000, 2),
        "slowest_1pct_mean_ms": round(_mean([totals[t] * 1000 for t in slowest]), 2),
    }
    return {"tasks": len(per_task), "slowest": len(slowest), "hops": hops}


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")
