"""``bench.pg_waits``: the statement kinds, and a sampler that sees a real backend wait."""

from __future__ import annotations

import collections
import threading

import psycopg

from bench.pg_waits import WaitKey, WaitSampler, statement_kind, waits_table


def test_a_statement_is_named_without_its_schema_and_line_breaks() -> None:
    query = (
        'INSERT INTO "bench_compare_1a2b"."longhaul_relay_position" (stream, position)\n   VALUES ($1, $2)'
    )

    assert statement_kind(query) == 'INSERT INTO "longhaul_relay_position" (stream, p'


def test_the_append_is_named_by_its_function_and_other_calls_by_their_text() -> None:
    append = 'SELECT n, lost FROM "bench_compare_1a2b".longhaul_append($1, $2, $3::uuid[])'
    other = "SELECT c.task_id FROM unnest($1::uuid[]) AS c(task_id)"

    assert statement_kind(append) == "longhaul_append(…)"
    assert statement_kind(other) == other[:48]


def test_shares_are_of_the_samples() -> None:
    counts: collections.Counter[WaitKey] = collections.Counter(
        {("CPU", "append"): 30, ("IO WALSync", "append"): 10, ("CPU", "select"): 5}
    )

    rows = waits_table(counts, samples=100, top=2)

    assert rows == [
        {"wait": "CPU", "statement": "append", "share": 0.3},
        {"wait": "IO WALSync", "statement": "append", "share": 0.1},
    ]
    assert waits_table(counts, samples=0, top=2) == []


def test_a_backend_is_chosen_by_the_schema_its_statement_names_and_sampled_waiting(database_url: str) -> None:
    with (
        psycopg.connect(database_url, autocommit=True) as sleeper,
        psycopg.connect(database_url, autocommit=True) as other,
    ):
        other_sleeps = threading.Thread(target=lambda: other.execute("SELECT pg_sleep(0.4)"))
        with WaitSampler(database_url, schema="bench_marker_s35", every_s=0.001) as sampler:
            other_sleeps.start()
            sleeper.execute("SELECT pg_sleep(0.3) AS bench_marker_s35")
        other_sleeps.join()

    marked = "SELECT pg_sleep(0.3) AS bench_marker_s35"
    assert sampler.samples > 20
    assert {statement for _, statement in sampler.counts} == {marked}  # not the other's
    slept = sampler.counts[("Timeout PgSleep", marked)]
    assert slept > 0.5 * sampler.samples  # most of the sampler's life (as it began, it ran: CPU)
