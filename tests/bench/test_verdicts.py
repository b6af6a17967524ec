"""The verdicts of ``bench.targets`` (``bench.verdicts``) over hand-made results, and the doc's table.

No benchmark runs here: each test builds the dicts the benchmarks return (``bench.a2a_compare.run``
and the others) by hand, with the figures it needs, and checks the verdict on each target: met,
missed, within 30 % of the target (not decided by one run), baseline missing, errors, a part
that failed or did not run. The last tests keep the target table at the top of
``docs/benchmarks.md`` and ``bench.verdicts.TARGETS`` equal, id for id.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bench import a2a_compare, sse_latency, step_throughput, webhook_latency
from bench.common import python_speed_ms
from bench.reasons import REQUEST_PROFILE, not_measured
from bench.sse_latency import HEADLINE as SSE_HEADLINE
from bench.sse_latency import RAW
from bench.targets import PARTS, STEP_RUNS, argv, decide_saved, heading, markdown
from bench.verdicts import TARGETS, UNDECIDED, Verdict, decide, decide_all
from bench.webhook_latency import HEADLINE as WEBHOOK_HEADLINE
from tests.bench.support import SDK_MEMORY, SDK_POSTGRES, a2a, parts, row, target

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
REPO_ROOT = BENCHMARKS.parents[1]
TABLE_HEADING = "## Where the targets of issues 7 and 10 stand"
ID_CELL = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|")

NOT_MEASURED = not_measured(REQUEST_PROFILE)


def sse_phase(streams: int, p99: float, raw_p99: float = 5.0, **extra: Any) -> dict[str, Any]:
    latency = {
        SSE_HEADLINE: {"p99_ms": p99, "median_ms": p99 / 3},
        RAW: {"p99_ms": raw_p99, "median_ms": 0.5},
    }
    phase: dict[str, Any] = {
        "streams": streams,
        "latency": latency,
        "commits_per_s": 200.0,
        "rate_per_s": 200.0,
        "frames_missing": 0,
        "client_errors": [],
        "memory_per_stream_bytes": {"uss": 32 * 1024, "rss": 33 * 1024},
    }
    return phase | extra


def steps_run(steps_per_s: float, plain_16: int, workers: int = 2) -> dict[str, Any]:
    return {
        "longhaul": {
            "steps_per_s_first_to_last": steps_per_s,
            "workers": workers,
            "concurrency_per_worker": 64 // workers,
        },
        "plain_psycopg": [{"clients": c, "commits_per_s": plain_16 // (17 - c)} for c in (1, 4)]
        + [{"clients": 16, "commits_per_s": plain_16}],
    }


def webhook_run(p99: float, raw_p99: float = 20.0, tasks: int = 6000, missing: int = 0) -> dict[str, Any]:
    return {
        "latency": {
            WEBHOOK_HEADLINE: {"p99_ms": p99, "median_ms": p99 / 4},
            RAW: {"p99_ms": raw_p99, "median_ms": 0.4},
        },
        "tasks": tasks,
        "load_seconds": 30.0,
        "rate_per_s": 200.0,
        "webhooks_missing": missing,
    }


# ------------------------------------------------------------------------------ the verdict rules


def test_a_ratio_far_above_its_target_is_met_and_far_below_missed() -> None:
    run = parts(
        a2a=a2a(
            {
                ("immediately", 1, "longhaul"): row(53.0, 18.6),
                ("immediately", 1, SDK_MEMORY): row(190.0, 4.0),
                ("immediately", 16, "longhaul"): row(181.0),
                ("immediately", 16, SDK_MEMORY): row(129.0),
            }
        )
    )
    slow, fast = decide(target("immediately-c1"), run), decide(target("immediately-c16"), run)
    assert (slow.outcome, slow.close, slow.problems) == ("missed", False, ())
    assert slow.ratio == pytest.approx(53 / 190)
    assert slow.reasons == (NOT_MEASURED,)  # these rows have no CPU figures
    assert slow.text() == f"missed: {NOT_MEASURED}"
    assert (fast.outcome, fast.close, fast.text()) == ("met", False, "met")
    assert fast.measured is not None
    assert fast.measured.figure_text == "181 req/s, p50 10.0 ms"
    assert fast.measured.baseline_text == "in-memory 129 req/s, p50 10.0 ms"


def test_a_ratio_within_30_percent_of_its_target_is_not_decided_by_one_run() -> None:
    run = parts(
        a2a=a2a(
            {
                ("blocking", 16, "longhaul"): row(109.0),
                ("blocking", 16, SDK_POSTGRES): row(56.0),  # 1.95x of a 2x target: missed, close
                ("blocking", 1, "longhaul"): row(50.0),
                ("blocking", 1, SDK_POSTGRES): row(22.0),  # 2.27x: met, close
            }
        )
    )
    missed, met = decide(target("blocking-c16"), run), decide(target("blocking-c1"), run)
    assert (missed.outcome, missed.close) == ("missed", True)
    assert missed.text() == f"missed {UNDECIDED}: {NOT_MEASURED}"
    assert (met.outcome, met.close) == ("met", True)
    assert met.text() == f"met (within 30 %: not decided by one run): {NOT_MEASURED}"


def test_a_missing_baseline_is_a_miss_that_says_so() -> None:
    run = parts(a2a=a2a({("immediately", 1, "longhaul"): row(300.0)}))
    verdict = decide(target("immediately-c1"), run)
    assert (verdict.outcome, verdict.ratio, verdict.why) == ("missed", None, ("baseline missing",))
    assert verdict.text() == "missed: baseline missing"


def test_a_figure_rule_is_decided_without_the_baseline_and_names_it_missing() -> None:
    verdict = decide(
        target("blocking-c1-p50"), parts(a2a=a2a({("blocking", 1, "longhaul"): row(100.0, 6.0)}))
    )
    assert (verdict.outcome, verdict.problems) == ("met", ("baseline missing",))
    assert verdict.close  # 6 ms is within 30 % of 8 ms


def test_no_figure_is_a_miss() -> None:
    verdict = decide(target("stream-first-c1"), parts(a2a=a2a({})))
    assert verdict.outcome == "missed"
    assert verdict.why == ("no figure", "baseline missing")


def test_a_nan_figure_is_no_figure() -> None:
    run = parts(a2a=a2a({("blocking", 1, "longhaul"): row(0.0, float("nan"))}))
    assert decide(target("blocking-c1-p50"), run).why[0] == "no figure"


def test_errors_are_named_even_when_the_figure_meets_its_target() -> None:
    failing = row(200.0, errors=3, error_kinds={"ReadError": 3})
    run = parts(
        a2a=a2a({("immediately", 16, "longhaul"): failing, ("immediately", 16, SDK_MEMORY): row(100.0)})
    )
    verdict = decide(target("immediately-c16"), run)
    assert verdict.outcome == "met"
    assert verdict.why == ("longhaul: 3 errors (ReadError 3)",)


def test_connections_dropped_at_128_clients_are_counted_over_every_mode() -> None:
    rows = {
        ("blocking", 128, "longhaul"): row(80.0, errors=1),
        ("immediately", 128, "longhaul"): row(100.0, errors=2),
        ("immediately", 128, SDK_MEMORY): row(90.0),
    }
    verdict = decide(target("load-c128-no-drop"), parts(a2a=a2a(rows)))
    assert (verdict.outcome, verdict.close) == ("missed", False)
    assert verdict.measured is not None
    assert verdict.measured.figure == 3
    assert verdict.measured.figure_text == "3 errors (blocking 1, returnImmediately 2)"
    clean = {key: value | {"errors": 0} for key, value in rows.items()}
    assert decide(target("load-c128-no-drop"), parts(a2a=a2a(clean))).text() == "met"
    overflowed = a2a(clean) | {"listen_overflows": 2}
    assert decide(target("load-c128-no-drop"), parts(a2a=overflowed)).text() == (
        "met: 2 listen overflows on the machine over the run"
    )


def test_the_overload_answer_is_met_by_a_refusal_and_missed_without_any() -> None:
    def verdict(refused: int) -> Verdict:
        rows = {
            ("immediately", 128, "longhaul"): row(100.0, refused=refused),
            ("immediately", 128, SDK_MEMORY): row(90.0),
        }
        return decide(target("load-overload-429"), parts(a2a=a2a(rows)))

    assert verdict(1177).text() == "met"
    assert verdict(0).text() == "missed: no 429 at 128 clients: queued, or not past capacity"


def test_128_clients_are_compared_with_longhaul_s_own_c16() -> None:
    rows = {("blocking", 128, "longhaul"): row(79.0), ("blocking", 16, "longhaul"): row(94.0)}
    verdict = decide(target("load-c128-blocking"), parts(a2a=a2a(rows)))
    assert (verdict.outcome, verdict.close) == ("missed", True)
    assert verdict.ratio == pytest.approx(79 / 94)


def test_a_stream_s_first_event_later_than_in_memory_s_is_a_miss() -> None:
    rows = {
        ("stream", 16, "longhaul"): row(70.0, first_p50_ms=60.0),
        ("stream", 16, SDK_MEMORY): row(150.0, first_p50_ms=53.3),
        ("stream", 1, "longhaul"): row(70.0, first_p50_ms=10.2),
        ("stream", 1, SDK_MEMORY): row(150.0, first_p50_ms=4.5),
    }
    run = parts(a2a=a2a(rows))
    c16, c1 = decide(target("stream-first-c16"), run), decide(target("stream-first-c1"), run)
    assert (c16.outcome, c16.close, c16.problems) == ("missed", True, ())
    assert (c1.outcome, c1.close, c1.problems) == ("missed", False, ())


def test_sse_verdicts_name_a_rate_not_reached_and_report_memory_per_stream() -> None:
    phases = [sse_phase(50, 8.6, commits_per_s=112.0, frames_missing=2), sse_phase(1000, 60.1, 13.0)]
    run = parts(sse={"phases": phases})
    small, many = decide(target("sse-p99-50"), run), decide(target("sse-p99-1000"), run)
    assert small.outcome == "met"
    assert small.problems == ("112 commits/s of the 200 asked", "2 frames missing")
    assert small.reasons == (  # hand-made results without the parts apart: the floor alone
        (
            "raw NATS (one core NATS message between two processes, in the same run) p99 5.0 ms, 50% of "
            "the 10 ms target"
        ),
        "hop by hop: docs/benchmarks.md §10",
    )
    assert (many.outcome, many.close) == ("missed", True)
    assert many.measured is not None
    assert many.measured.figure_text.endswith("; 32.0 KiB per open stream (USS)")
    assert many.ratio == pytest.approx(60.1 / 13.0)
    assert decide(target("sse-p99-1000"), parts(sse={"phases": phases[:1]})).why[:2] == (
        "no figure",
        "no phase of 1000 streams",
    )


def test_step_targets_read_their_own_run_and_plain_psycopg_at_16_clients() -> None:
    run = parts(steps={"two_workers": steps_run(1455.0, 2289), "one_worker": steps_run(3081.0, 2700, 1)})
    two = decide(target("steps-2w"), run)
    assert (two.outcome, two.close, two.problems) == ("missed", True, ())
    assert two.reasons == ("this part's figures do not tell why; see docs/benchmarks.md §2",)
    half = decide(target("steps-2w-half-plain"), run)
    assert half.ratio == pytest.approx(1455 / 2289)
    assert (half.outcome, half.close) == ("met", True)  # 0.64 is within 30 % of 0.5
    assert decide(target("steps-1w"), run).text().startswith(f"met {UNDECIDED}: ")
    failed = parts(steps={"two_workers": {"error": "RuntimeError: only 3/400 tasks completed"}})
    assert decide(target("steps-2w"), failed).why[0] == "no figure"
    assert (
        "the run failed: RuntimeError: only 3/400 tasks completed" in decide(target("steps-2w"), failed).why
    )
    assert decide(target("steps-1w"), failed).why[:2] == ("no figure", "no one worker run")


def test_webhook_verdict_is_on_the_completed_p99() -> None:
    floor = (
        "raw NATS (one core NATS message between two processes, in the same run) p99 20.0 ms, 40% of "
        "the 50 ms target"
    )
    hops = "hop by hop: docs/benchmarks.md §8"
    assert (
        decide(target("webhook-p99"), parts(webhook=webhook_run(271.0))).text() == f"missed: {floor}; {hops}"
    )
    slow = decide(target("webhook-p99"), parts(webhook=webhook_run(45.0, tasks=3000, missing=4)))
    assert (
        slow.text() == f"met {UNDECIDED}: 100 tasks/s of the 200 asked; 4 webhooks missing; {floor}; {hops}"
    )
    assert decide(target("webhook-p99"), parts(webhook=webhook_run(20.0))).text() == "met"


def test_a_part_not_run_or_failed_decides_its_targets_so() -> None:
    failed = {"sse": {"error": "TimeoutError: the gateway does not serve"}}
    for verdict in decide_all(failed):
        if verdict.target.part == "sse":
            assert verdict.text() == "missed: the part failed: TimeoutError: the gateway does not serve"
        else:
            assert verdict.text() == f"not run: part {verdict.target.part} not run"


# ------------------------------------------------------------------------------ properties over ratios

ratios = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
baselines = st.floats(min_value=1.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(ratio=ratios, baseline=baselines)
def test_a_throughput_target_is_met_exactly_when_its_ratio_reaches_it(ratio: float, baseline: float) -> None:
    figure = ratio * baseline
    run = parts(
        a2a=a2a({("blocking", 1, "longhaul"): row(figure), ("blocking", 1, SDK_POSTGRES): row(baseline)})
    )
    verdict = decide(target("blocking-c1"), run)  # >= 2x
    measured = figure / baseline
    assume(abs(abs(measured - 2.0) - 0.6) > 1e-9)  # not on the edge of "within 30 %" by rounding
    assert verdict.ratio == pytest.approx(measured)
    assert (verdict.outcome == "met") == (measured >= 2.0)
    assert verdict.close == (1.4 < measured < 2.6)
    assert (UNDECIDED in verdict.text()) == verdict.close
    assert verdict.problems == ()
    assert bool(verdict.reasons) == (verdict.outcome == "missed" or verdict.close)


@given(ratio=ratios, baseline=baselines)
def test_a_no_later_than_target_is_met_exactly_when_its_ratio_is_at_most_one(
    ratio: float, baseline: float
) -> None:
    figure = ratio * baseline
    rows = {
        ("stream", 1, "longhaul"): row(1.0, first_p50_ms=figure),
        ("stream", 1, SDK_MEMORY): row(1.0, first_p50_ms=baseline),
    }
    verdict = decide(target("stream-first-c1"), parts(a2a=a2a(rows)))
    measured = figure / baseline
    assume(abs(abs(measured - 1.0) - 0.3) > 1e-9)
    assert (verdict.outcome == "met") == (measured <= 1.0)
    assert verdict.close == (0.7 < measured < 1.3)
    assert verdict.text().startswith(("met", "missed"))


@given(low=ratios, high=ratios, baseline=baselines)
def test_a_higher_throughput_never_turns_met_into_missed(low: float, high: float, baseline: float) -> None:
    def outcome(ratio: float) -> str:
        rows = {
            ("immediately", 1, "longhaul"): row(ratio * baseline),
            ("immediately", 1, SDK_MEMORY): row(baseline),
        }
        return decide(target("immediately-c1"), parts(a2a=a2a(rows))).outcome

    low, high = sorted((low, high))
    assert not (outcome(low) == "met" and outcome(high) == "missed")


@given(p99=st.floats(min_value=0.01, max_value=1e5, allow_nan=False), raw=baselines)
def test_a_latency_target_is_decided_on_the_figure_whatever_the_baseline(p99: float, raw: float) -> None:
    assume(abs(abs(p99 - 50.0) - 15.0) > 1e-9)
    verdict = decide(target("webhook-p99"), parts(webhook=webhook_run(p99, raw)))
    assert (verdict.outcome == "met") == (p99 < 50.0)
    assert verdict.close == (35.0 < p99 < 65.0)
    assert verdict.ratio == pytest.approx(p99 / raw)


# ------------------------------------------------------------------------------ the list and the doc


def table_ids(text: str) -> list[str]:
    return [m.group(1) for line in text.splitlines() if (m := ID_CELL.match(line))]


def targets_table() -> str:
    """The section of docs/benchmarks.md with the target table, up to the next ``## ``."""
    lines = BENCHMARKS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_HEADING))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end])


def test_every_target_has_its_own_id_and_a_part_that_bench_targets_runs() -> None:
    ids = [t.id for t in TARGETS]
    assert len(ids) == len(set(ids))
    assert {t.part for t in TARGETS} == set(PARTS)
    assert {t.issue for t in TARGETS} == {7, 10}


def test_the_doc_s_target_table_has_exactly_the_targets_of_the_code() -> None:
    documented = table_ids(targets_table())
    assert len(documented) == len(set(documented)), "docs/benchmarks.md: a target id twice"
    in_code = [t.id for t in TARGETS]
    assert set(documented) == set(in_code), (
        f"docs/benchmarks.md's target table and bench.verdicts.TARGETS differ: "
        f"only in the doc {sorted(set(documented) - set(in_code))}, "
        f"only in the code {sorted(set(in_code) - set(documented))}"
    )


def test_the_markdown_table_bench_targets_writes_can_be_pasted_into_the_doc() -> None:
    text = markdown(decide_all({}), "heading")
    assert table_ids(text) == [t.id for t in TARGETS]
    header = next(line for line in targets_table().splitlines() if line.startswith("| id |"))
    assert header in text.splitlines()


@pytest.mark.parametrize("quick", [False, True])
def test_every_part_s_command_line_is_one_its_benchmark_accepts(quick: bool) -> None:
    args = argparse.Namespace(quick=quick, database_url="postgresql://nowhere/x", nats_url="nats://nowhere:1")
    a2a_args = a2a_compare.parse_args(argv("a2a", args))
    assert a2a_args.servers == ["longhaul", SDK_MEMORY, SDK_POSTGRES]
    assert a2a_args.modes == ["blocking", "immediately", "stream"]
    assert {1, 16, 128} <= set(a2a_args.concurrency)
    assert (64 in a2a_args.concurrency) is not quick
    assert a2a_args.client_per_caller
    assert a2a_args.no_json
    sse_args = sse_latency.arguments(argv("sse", args))
    assert (sse_args.streams, sse_args.rate, sse_args.nats_url) == ([50, 1000], 200.0, "nats://nowhere:1")
    for words in STEP_RUNS.values():
        steps_args = step_throughput.arguments([*argv("steps", args), *words])
        assert steps_args.baseline_clients == [1, 4, 16]
        assert steps_args.no_json
    hooks = webhook_latency.arguments(argv("webhook", args))
    assert (hooks.rate, hooks.receiver, hooks.database_url) == (200.0, "process", "postgresql://nowhere/x")


def test_the_doc_s_table_is_what_bench_targets_decides_for_the_run_it_names(tmp_path: Path) -> None:
    section = targets_table()
    named = re.search(r"<!-- bench\.targets --decide (\S+) -->\n", section)
    assert named is not None, (
        "docs/benchmarks.md: the target table names no run (<!-- bench.targets --decide FILE -->)"
    )
    written = tmp_path / "targets.md"
    decide_saved(argparse.Namespace(decide=REPO_ROOT / named.group(1), markdown=written))
    assert section[named.end() :].startswith(written.read_text()), (
        f"docs/benchmarks.md's target table is not what `python -m bench.targets --decide {named.group(1)} "
        "--markdown FILE` writes: paste that file again"
    )


def test_the_heading_names_the_processor_s_speed_when_the_run_measured_it() -> None:
    """Runs of one code on machines of one kind differ twofold with the processor (session 33)."""
    args = argparse.Namespace(quick=False, parts=list(PARTS))
    loads = {name: {"loadavg_before": [1.0, 0.0, 0.0], "loadavg_after": [2.0, 0.0, 0.0]} for name in PARTS}
    info = {"git_commit": "abc1234", "measured_at": "2026-12-05T03:00:00+00:00"}
    measured = heading(args, {**info, "python_ms_per_million_additions": 75.2}, loads)
    assert "the processor: a million Python additions in 75.2 ms" in measured
    assert "Python additions" not in heading(args, info, loads)  # a run saved before it was measured


def test_the_processor_s_speed_is_a_time_this_process_measured() -> None:
    fastest = python_speed_ms()
    assert 1.0 < fastest < 10_000.0
