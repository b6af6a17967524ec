"""The targets' verdicts from hand-made results of each part (``bench.targets``), and the run's
command line and table (``bench.__main__``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bench import __main__ as bench_main
from bench import sse_latency, webhook_latency
from bench.a2a_compare import visits
from bench.common import REPO_ROOT
from bench.nats_watch import RAW
from bench.targets import TARGETS, UNDECIDED, Target, Verdict, decide, decide_all

SDK_MEMORY, SDK_POSTGRES, ANSWER = "sdk-memory", "sdk-postgres", "longhaul-answer"
BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
ID_CELL = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|")


def target(target_id: str) -> Target:
    return next(t for t in TARGETS if t.id == target_id)


def row(per_s: float, p50: float = 10.0, p99: float = 50.0, **extra: Any) -> dict[str, Any]:
    """One server's summary, as ``bench.a2a_compare.summarise`` makes it."""
    return {"per_s_median": per_s, "p50_ms": p50, "p99_ms": p99, "errors": 0, "refused": 0} | extra


def a2a(rows: dict[tuple[str, int, str], dict[str, Any]]) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for (mode, c, server), summary in rows.items():
        results.setdefault(f"{mode}@c={c}", {})[server] = summary
    return {"results": results}


def parts(**by_part: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"results": results} for name, results in by_part.items()}


def sse_phase(streams: int, p99: float, raw_p99: float = 5.0, **extra: Any) -> dict[str, Any]:
    phase: dict[str, Any] = {
        "streams": streams,
        "latency": {
            sse_latency.HEADLINE: {"p99_ms": p99, "median_ms": p99 / 3},
            RAW: {"p99_ms": raw_p99, "median_ms": 0.5},
        },
        "commits_per_s": 200.0,
        "rate_per_s": 200.0,
        "frames_missing": 0,
        "client_errors": [],
        "memory_per_stream_bytes": {"uss": 32 * 1024, "rss": 33 * 1024},
    }
    return phase | extra


def steps_run(two: float, one: float, plain_16: int) -> dict[str, Any]:
    return {
        "runs": {
            "two_workers": {"steps_per_s_first_to_last": two, "workers": 2, "concurrency_per_worker": 32},
            "one_worker": {"steps_per_s_first_to_last": one, "workers": 1, "concurrency_per_worker": 64},
        },
        "plain_psycopg": [{"clients": 4, "commits_per_s": 900}, {"clients": 16, "commits_per_s": plain_16}],
    }


def webhook_run(p99: float, raw_p99: float = 20.0, tasks: int = 6000, missing: int = 0) -> dict[str, Any]:
    return {
        "latency": {
            webhook_latency.HEADLINE: {"p99_ms": p99, "median_ms": p99 / 4},
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
                ("immediately", 16, "longhaul"): row(181.0),
                ("immediately", 16, SDK_MEMORY): row(129.0),
                ("blocking", 16, "longhaul"): row(50.0),
                ("blocking", 16, SDK_POSTGRES): row(100.0),
            }
        )
    )
    fast, slow = decide(target("immediately-c16"), run), decide(target("blocking-c16"), run)
    assert (fast.outcome, fast.close, fast.text()) == ("met", False, "met")
    assert fast.measured is not None
    assert fast.measured.figure_text == "181 req/s, p50 10.0 ms"
    assert fast.measured.baseline_text == "in-memory 129 req/s, p50 10.0 ms"
    assert (slow.outcome, slow.close) == ("missed", False)
    assert slow.ratio == pytest.approx(0.5)


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
    assert (missed.outcome, missed.close, missed.text()) == ("missed", True, f"missed {UNDECIDED}")
    assert (met.outcome, met.close, met.text()) == ("met", True, f"met {UNDECIDED}")


def test_the_c1_answer_targets_read_the_durable_answer_and_show_the_whole_up_beside_it() -> None:
    rows = {
        ("immediately", 1, ANSWER): row(328.0, 3.0),
        ("immediately", 1, "longhaul"): row(158.0, 6.1),
        ("immediately", 1, SDK_MEMORY): row(312.0, 2.9),
        ("stream", 1, ANSWER): row(300.0, first_p50_ms=3.3),
        ("stream", 1, "longhaul"): row(100.0, first_p50_ms=5.0),
        ("stream", 1, SDK_MEMORY): row(200.0, first_p50_ms=3.1),
    }
    run = parts(a2a=a2a(rows))
    answer, first = decide(target("immediately-c1"), run), decide(target("stream-first-c1"), run)
    assert answer.outcome == "met"
    assert answer.ratio == pytest.approx(328 / 312)
    assert answer.measured is not None
    assert answer.measured.figure_text == "328 req/s, p50 3.0 ms (whole up: 158 req/s, p50 6.1 ms)"
    assert (first.outcome, first.close) == ("missed", True)
    assert first.ratio == pytest.approx(3.3 / 3.1)
    assert first.measured is not None
    assert first.measured.figure_text == "first p50 3.3 ms (whole up: first p50 5.0 ms)"


def test_cpu_per_durable_task_is_up_and_its_backends_beside_in_memory_s_per_request() -> None:
    rows = {
        ("blocking", 1, "longhaul"): row(
            200.0, cpu_ms_per_request=4.9, server_postgres_cpu_ms_per_request=2.1
        ),
        ("blocking", 1, SDK_MEMORY): row(300.0, cpu_ms_per_request=3.0),
    }
    verdict = decide(target("cpu-per-task-c1"), parts(a2a=a2a(rows)))
    assert verdict.outcome == "missed"
    assert verdict.ratio == pytest.approx(7.0 / 3.0)
    assert verdict.measured is not None
    assert verdict.measured.figure_text == "7.00 ms (4.90 up + 2.10 its PostgreSQL)"
    unread = rows | {("blocking", 1, "longhaul"): row(200.0, cpu_ms_per_request=4.9)}
    assert decide(target("cpu-per-task-c1"), parts(a2a=a2a(unread))).why[0] == "no figure"


def test_a_missing_baseline_is_a_miss_that_says_so() -> None:
    run = parts(a2a=a2a({("immediately", 1, ANSWER): row(300.0)}))
    verdict = decide(target("immediately-c1"), run)
    assert (verdict.outcome, verdict.ratio, verdict.why) == ("missed", None, ("baseline missing",))


def test_a_nan_figure_is_no_figure() -> None:
    run = parts(a2a=a2a({("blocking", 1, "longhaul"): row(float("nan"))}))
    assert decide(target("blocking-c1"), run).why[0] == "no figure"


def test_errors_are_named_even_when_the_figure_meets_its_target() -> None:
    failing = row(200.0, errors=3, error_kinds={"ReadError": 3})
    run = parts(
        a2a=a2a({("immediately", 16, "longhaul"): failing, ("immediately", 16, SDK_MEMORY): row(100.0)})
    )
    verdict = decide(target("immediately-c16"), run)
    assert (verdict.outcome, verdict.why) == ("met", ("longhaul: 3 errors (ReadError 3)",))


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


def test_sse_verdicts_name_a_rate_not_reached_and_report_memory_per_stream() -> None:
    phases = [sse_phase(50, 8.6, commits_per_s=112.0, frames_missing=2), sse_phase(1000, 60.1, 13.0)]
    run = parts(sse={"phases": phases})
    small, many = decide(target("sse-p99-50"), run), decide(target("sse-p99-1000"), run)
    assert small.outcome == "met"
    assert small.why == ("112 commits/s of the 200 asked", "2 frames missing")
    assert (many.outcome, many.close) == ("missed", True)
    assert many.ratio == pytest.approx(60.1 / 13.0)
    assert many.measured is not None
    assert many.measured.figure_text.endswith("; 32.0 KiB per open stream (USS)")
    assert decide(target("sse-p99-1000"), parts(sse={"phases": phases[:1]})).why[:2] == (
        "no figure",
        "no phase of 1000 streams",
    )


def test_step_targets_read_their_own_run_and_plain_psycopg_at_16_clients() -> None:
    run = parts(steps=steps_run(1455.0, 3081.0, 2289))
    two = decide(target("steps-2w"), run)
    assert (two.outcome, two.close) == ("missed", True)
    half = decide(target("steps-2w-half-plain"), run)
    assert (half.outcome, half.close) == ("met", True)
    assert half.ratio == pytest.approx(1455 / 2289)
    assert decide(target("steps-1w"), run).text() == f"met {UNDECIDED}"
    assert decide(target("steps-1w"), parts(steps={"runs": {}})).why[:2] == ("no figure", "no one worker run")


def test_webhook_verdict_is_on_the_completed_p99() -> None:
    assert decide(target("webhook-p99"), parts(webhook=webhook_run(271.0))).text() == "missed"
    slow = decide(target("webhook-p99"), parts(webhook=webhook_run(45.0, tasks=3000, missing=4)))
    assert slow.text() == f"met {UNDECIDED}: 100 tasks/s of the 200 asked; 4 webhooks missing"
    assert decide(target("webhook-p99"), parts(webhook=webhook_run(20.0))).text() == "met"


def test_resume_is_decided_on_the_standby_case_nearest_its_lease() -> None:
    summary = [
        {
            "lease_s": 2.0,
            "mode": "standby",
            "kill_to_first_commit_max_s": 2.9,
            "reference_lease_plus_1s": 3.0,
        },
        {"lease_s": 2.0, "mode": "cold", "kill_to_first_commit_max_s": 3.7, "reference_lease_plus_1s": 3.0},
        {
            "lease_s": 5.0,
            "mode": "standby",
            "kill_to_first_commit_max_s": 5.2,
            "reference_lease_plus_1s": 6.0,
        },
    ]
    verdict = decide(target("resume-after-kill"), parts(resume={"summary": summary}))
    assert verdict.outcome == "met"
    assert verdict.ratio == pytest.approx(2.9 / 3.0)
    assert verdict.measured is not None
    assert verdict.measured.figure_text == "2.90 s (2 s lease, standby)"


def test_file_targets_read_the_files_part_beside_cp_idle_and_an_echo_task() -> None:
    results = {
        "bytes": 2**30,
        "cp_mib_s": 1000.0,
        "download_mib_s": 620.0,
        "upload_mib_s": 300.0,
        "idle_rss_mb": 120.0,
        "peak_above_idle_mb": {"write": 40.0, "download_upload": 160.0},
        "get_task_ms": {"big_file": 3.0, "echo": 4.0},
    }
    run = parts(files=results)
    download = decide(target("files-download"), run)
    assert download.outcome == "met"
    assert download.ratio == pytest.approx(0.62)
    assert decide(target("files-upload"), run).outcome == "missed"
    memory = decide(target("files-memory"), run)  # the larger of the two peaks
    assert (memory.outcome, memory.measured.figure if memory.measured else None) == ("missed", 160.0)
    get_task = decide(target("files-get-task"), run)
    assert get_task.outcome == "met"
    assert get_task.ratio == pytest.approx(0.75)
    assert decide(target("files-download"), parts(files={})).why[:1] == ("no figure",)


def test_a_part_not_run_or_failed_decides_its_targets_so() -> None:
    failed = {"sse": {"error": "TimeoutError: the gateway does not serve"}}
    for verdict in decide_all(failed):
        if verdict.target.part == "sse":
            assert verdict.text() == "missed: the part failed: TimeoutError: the gateway does not serve"
        else:
            assert verdict.text() == f"not run: part {verdict.target.part} not run"


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


@given(ratio=ratios, baseline=baselines)
def test_a_no_later_than_target_is_met_exactly_when_its_ratio_is_at_most_one(
    ratio: float, baseline: float
) -> None:
    rows = {
        ("stream", 16, "longhaul"): row(10.0, first_p50_ms=ratio * baseline),
        ("stream", 16, SDK_MEMORY): row(10.0, first_p50_ms=baseline),
    }
    verdict = decide(target("stream-first-c16"), parts(a2a=a2a(rows)))
    assert (verdict.outcome == "met") == (ratio * baseline / baseline <= 1.0)


@given(p99=st.floats(min_value=0.1, max_value=1e4), raw=st.floats(min_value=0.1, max_value=1e3))
def test_a_latency_target_is_decided_on_the_figure_whatever_the_baseline(p99: float, raw: float) -> None:
    verdict = decide(target("webhook-p99"), parts(webhook=webhook_run(p99, raw)))
    assert (verdict.outcome == "met") == (p99 < 50.0)


# ------------------------------------------------------------------------------ the list and the run


def test_every_target_has_its_own_id_and_a_part_the_run_has() -> None:
    assert len({t.id for t in TARGETS}) == len(TARGETS)
    assert {t.part for t in TARGETS} == set(bench_main.PARTS)


def test_the_doc_s_target_table_has_exactly_the_targets_of_the_code() -> None:
    ids = [m.group(1) for line in BENCHMARKS.read_text().splitlines() if (m := ID_CELL.match(line))]
    assert ids == [t.id for t in TARGETS]


def test_the_markdown_table_has_a_row_per_target_and_escapes_its_cells() -> None:
    rows = {("immediately", 128, "longhaul"): row(100.0, p99=1200.0)}
    text = bench_main.markdown(decide_all(parts(a2a=a2a(rows))))
    lines = text.splitlines()
    assert len(lines) == 2 + len(TARGETS)
    assert all(ID_CELL.match(line) for line in lines[2:])
    assert "| `load-c128-p99` | p99 1,200 ms |" in text


def test_the_command_line_takes_the_parts_by_name_and_refuses_others() -> None:
    args = bench_main.arguments(["--quick", "--parts", "a2a, sse"])
    assert (args.quick, args.parts) == (True, ["a2a", "sse"])
    assert args.out.relative_to(REPO_ROOT) == Path("bench/results/bench.json")
    with pytest.raises(SystemExit):
        bench_main.arguments(["--parts", "a2a,nope"])


def test_the_result_file_is_not_committed() -> None:
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert "/bench/results/" in ignored


def test_the_durable_answer_is_run_where_its_targets_are_and_nowhere_else() -> None:
    assert [visits(ANSWER, mode, 1) for mode in ("blocking", "immediately", "stream")] == [False, True, True]
    assert not visits(ANSWER, "immediately", 16)
    assert all(visits(name, "blocking", 128) for name in ("longhaul", SDK_MEMORY, SDK_POSTGRES))
