"""Why a target was missed, from the run's figures (``bench.reasons``), over hand-made results.

Each test gives ``bench.a2a_compare``'s rows the CPU figures it needs (``cpu``) and checks the
reasons ``bench.verdicts.decide`` attaches: the whole sentence where its figures are the point,
so a wrong number, a wrong branch or a missing reason fails.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench import sse_latency, webhook_latency
from bench.a2a_load import Round
from bench.a2a_report import cpu_summary, summarise
from bench.reasons import ONE_CORE, REQUEST_PROFILE, SATURATED, STREAM_PROFILE, TIMES
from bench.targets import WHY_HEADING, markdown
from bench.verdicts import decide, decide_all
from tests.bench.support import SDK_MEMORY, SDK_POSTGRES, a2a, parts, row, target

PG_NOTE = "(all of the machine's PostgreSQL, whoever used it)"


def cpu(
    ms: float,
    cores: float,
    *,
    pg_ms: float | None = 3.0,
    pg_cores: float | None = 0.2,
    client: float = 0.1,
    busy: float = 1.2,
    own_pg_ms: float | None = None,
    own_pg_cores: float | None = None,
) -> dict[str, Any]:
    """The CPU keys of a row, as ``bench.a2a_report.cpu_summary`` adds them; the server's own
    PostgreSQL backends' (``own_pg_*``) only when given, as in results from before they were read."""
    own = {} if own_pg_ms is None else {"server_postgres_cpu_ms_per_request": own_pg_ms}
    return (
        own
        | ({} if own_pg_cores is None else {"server_postgres_cores": own_pg_cores})
        | {
            "cpu_ms_per_request": ms,
            "server_cores": cores,
            "postgres_cpu_ms_per_request": pg_ms,
            "postgres_cores": pg_cores,
            "client_cpu_ms_per_request": 0.5,
            "client_cores": client,
            "machine_busy_cores": busy,
        }
    )


def test_a_c1_miss_names_the_cpu_per_request_the_one_core_bound_and_the_budget() -> None:
    rows = {
        ("immediately", 1, "longhaul"): row(57.0, 15.0) | cpu(15.0, 0.86, busy=1.3),
        ("immediately", 1, SDK_MEMORY): row(318.0, 2.3) | cpu(2.0, 0.64, pg_ms=0.1),
    }
    verdict = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2)))
    assert verdict.outcome == "missed"
    assert verdict.problems == ()
    assert verdict.why == verdict.reasons
    assert verdict.reasons == (
        (
            "longhaul up used 15.0 ms CPU per request (in-memory server 2.0 ms); the machine's "
            f"PostgreSQL 3.0 ms per longhaul request, 0.1 ms per in-memory request {PG_NOTE}"
        ),
        (
            "at c=1 a request waits behind its predecessors' background work (their tasks' worker, "
            f"projector, relay, sequencer: {REQUEST_PROFILE}) on one GIL: 15.0 ms per request bounds "
            "longhaul up near 1000/15.0 = 67 req/s on one core; it reached 57 req/s with 0.86 of a "
            "core busy"
        ),
        f"the target, 318 req/s, leaves 3.1 ms of one core per request: 4.8{TIMES} less than now",
        (
            "longhaul up and the machine's PostgreSQL together used 18.0 ms of CPU per request: "
            "318 req/s at that cost needs 5.7 cores, the machine has 2"
        ),
    )


def test_with_its_own_backends_measured_the_reasons_name_them_beside_the_machine_s_postgresql() -> None:
    rows = {
        ("immediately", 1, "longhaul"): row(57.0, 15.0) | cpu(15.0, 0.86, busy=1.3, own_pg_ms=2.5),
        ("immediately", 1, SDK_MEMORY): row(318.0, 2.3) | cpu(2.0, 0.64, pg_ms=0.1, own_pg_ms=0.0),
    }
    reasons = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[0] == (
        "longhaul up used 15.0 ms CPU per request (in-memory server 2.0 ms); its own PostgreSQL "
        "backends 2.5 ms per request, the in-memory server's 0.0 ms; the machine's PostgreSQL 3.0 ms "
        f"per longhaul request, 0.1 ms per in-memory request {PG_NOTE}"
    )
    assert reasons[3] == (
        "longhaul up and its own PostgreSQL backends together used 17.5 ms of CPU per request: "
        "318 req/s at that cost needs 5.6 cores, the machine has 2"
    )
    blocking = {
        ("blocking", 16, "longhaul"): row(122.0, 119.4)
        | cpu(9.0, 1.1, pg_cores=0.5, client=0.2, busy=1.95, own_pg_ms=2.0, own_pg_cores=0.35),
        ("blocking", 16, SDK_POSTGRES): row(77.0, 202.0) | cpu(6.0, 0.46, own_pg_ms=1.5),
    }
    reasons = decide(target("blocking-c16"), parts(a2a=a2a(blocking, nproc=2))).reasons
    assert reasons[0].startswith(
        "longhaul up used 9.0 ms CPU per request (PostgreSQL store server 6.0 ms); its own PostgreSQL "
        "backends 2.0 ms per request, the PostgreSQL store server's 1.5 ms; the machine's PostgreSQL"
    )
    assert reasons[-1] == (
        "the machine's 2 cores were saturated: 1.95 busy on average (longhaul up 1.10, its PostgreSQL "
        "backends 0.35, the rest of PostgreSQL 0.15, the load client 0.20, everything else 0.15)"
    )


def test_a_c1_miss_with_the_process_not_busy_says_the_figures_do_not_split_it() -> None:
    rows = {
        ("immediately", 1, "longhaul"): row(57.0, 15.0) | cpu(15.0, 0.4),
        ("immediately", 1, SDK_MEMORY): row(318.0, 2.3) | cpu(2.0, 0.64),
    }
    reasons = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[1] == (
        "longhaul up was busy only 0.40 of a core at 57 req/s (one core would bound it at "
        "1000/15.0 = 67 req/s): the rest of each request is waiting, which these figures do not "
        f"split; see {REQUEST_PROFILE}"
    )
    assert not any("GIL" in reason for reason in reasons)
    rows[("immediately", 1, "longhaul")] |= {"machine_busy_cores": 1.9}  # others' work on the cores
    reasons = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[1].endswith(
        "the rest of each request is waiting, for a core among the others' work (saturated, "
        f"below) and for what these figures do not split; see {REQUEST_PROFILE}"
    )
    assert reasons[4].startswith("the machine's 2 cores were saturated: 1.90 busy on average")


def test_blocking_c1_s_budget_is_from_twice_the_postgresql_store() -> None:
    rows = {
        ("blocking", 1, "longhaul"): row(34.0, 23.9) | cpu(20.0, 0.78),
        ("blocking", 1, SDK_POSTGRES): row(48.0, 19.2) | cpu(5.0, 0.24, pg_ms=4.0),
    }
    verdict = decide(target("blocking-c1"), parts(a2a=a2a(rows, nproc=2)))
    assert verdict.reasons[0] == (
        "longhaul up used 20.0 ms CPU per request (PostgreSQL store server 5.0 ms); the machine's "
        f"PostgreSQL 3.0 ms per longhaul request, 4.0 ms per PostgreSQL store request {PG_NOTE}"
    )
    assert "1000/20.0 = 50 req/s on one core" in verdict.reasons[1]
    assert verdict.reasons[2] == (
        f"the target, 96 req/s, leaves 10.4 ms of one core per request: 1.9{TIMES} less than now"
    )
    assert verdict.reasons[3] == (
        "longhaul up and the machine's PostgreSQL together used 23.0 ms of CPU per request: "
        "96 req/s at that cost needs 2.2 cores, the machine has 2"
    )


def test_no_machine_budget_without_postgresql_s_cpu() -> None:
    rows = {
        ("blocking", 1, "longhaul"): row(34.0, 23.9)
        | cpu(20.0, 0.78)
        | {"postgres_cpu_ms_per_request": None},
        ("blocking", 1, SDK_POSTGRES): row(48.0, 19.2) | cpu(5.0, 0.24, pg_ms=4.0),
    }
    reasons = decide(target("blocking-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert not any("together used" in reason for reason in reasons)


def test_the_p50_reason_depends_on_whether_the_cpu_per_request_exceeds_the_budget() -> None:
    def reasons(ms: float) -> tuple[str, ...]:
        rows = {("blocking", 1, "longhaul"): row(34.0, 23.9) | cpu(ms, 0.68)}
        return decide(target("blocking-c1-p50"), parts(a2a=a2a(rows, nproc=2))).reasons

    assert reasons(20.0)[1] == (
        "20.0 ms CPU per request (0.68 of a core) is more than the 8 ms budget: at c=1 a "
        "request's own path and the background work its predecessors left share one GIL, so a "
        f"p50 under 8 ms needs that work under 8 ms of a core per request ({REQUEST_PROFILE})"
    )
    assert reasons(5.0)[1] == (
        "5.0 ms CPU per request is under the 8 ms budget: the rest of the p50 23.9 ms is "
        f"waiting, which these figures do not split; see {REQUEST_PROFILE}"
    )


def test_c16_against_twice_the_store_names_the_cores_it_needs_and_a_saturated_machine() -> None:
    rows = {
        ("blocking", 16, "longhaul"): row(122.0, 119.4) | cpu(9.0, 1.1, pg_cores=0.5, client=0.2, busy=1.95),
        ("blocking", 16, SDK_POSTGRES): row(77.0, 202.0) | cpu(6.0, 0.46),
    }
    verdict = decide(target("blocking-c16"), parts(a2a=a2a(rows, nproc=2)))
    assert verdict.close
    assert verdict.reasons[1:] == (
        (
            f"2{TIMES} the PostgreSQL store server's 77 req/s at 9.0 ms per request needs 1.39 cores of "
            "longhaul up alone (2 on the machine); it used 1.10"
        ),
        (
            "the machine's 2 cores were saturated: 1.95 busy on average (longhaul up 1.10, PostgreSQL "
            "0.50, the load client 0.20, everything else 0.15)"
        ),
    )


def test_c128_names_one_gil_the_429s_and_the_cpu_per_request_beside_c16() -> None:
    rows = {
        ("blocking", 16, "longhaul"): row(122.0) | cpu(8.0, 0.98),
        ("blocking", 128, "longhaul"): row(117.0, 300.0, refused=1422, to_success_p50_ms=1200.0)
        | cpu(9.5, 0.9, busy=1.5),
    }
    verdict = decide(target("load-c128-blocking"), parts(a2a=a2a(rows, nproc=2)))
    assert verdict.reasons[1:] == (
        "CPU per request 8.0 ms at c=16, 9.5 ms at c=128",
        (
            "longhaul up was busy 0.90 cores, about the one its GIL's Python can use (1.50 of 2 of "
            "the machine's cores busy)"
        ),
        (
            "1,422 answers 429 (the in-flight limit): each refused caller waited the answer's "
            "Retry-After before sending again (to success p50 1,200 ms against p50 300 ms of a "
            "completed try)"
        ),
    )


def test_when_neither_the_cores_nor_429s_explain_it_the_reason_says_the_figures_do_not_tell() -> None:
    rows = {
        ("blocking", 16, "longhaul"): row(122.0) | cpu(8.0, 0.5),
        ("blocking", 128, "longhaul"): row(100.0) | cpu(8.0, 0.5, busy=1.0),
    }
    reasons = decide(target("load-c128-blocking"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[-1] == (
        "not the cores (1.00 of 2 busy, longhaul up 0.50) and no 429: these figures do not tell "
        f"what bounds it; see {REQUEST_PROFILE}"
    )


def test_a_stream_s_first_event_is_explained_per_stream_with_the_stream_profile() -> None:
    rows = {
        ("stream", 1, "longhaul"): row(33.0, first_p50_ms=9.1) | cpu(25.0, 0.82),
        ("stream", 1, SDK_MEMORY): row(299.0, first_p50_ms=3.2) | cpu(3.0, 0.88, pg_ms=0.03),
    }
    reasons = decide(target("stream-first-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[0].startswith(
        "longhaul up used 25.0 ms CPU per stream (in-memory server 3.0 ms); the machine's "
        "PostgreSQL 3.0 ms per longhaul stream, 0.0 ms per in-memory stream"
    )
    assert reasons[1] == (
        "longhaul up was busy 0.82 of a core: at c=1 a stream's first event (its submission's "
        "commit, the primed frame) waits behind the earlier tasks' background work on one GIL; "
        f"these figures do not split the first event's path: see {STREAM_PROFILE}"
    )


def test_postgresql_not_visible_is_said_so() -> None:
    rows = {("blocking", 1, "longhaul"): row(34.0, 23.9) | cpu(20.0, 0.68, pg_ms=None, pg_cores=None)}
    reasons = decide(target("blocking-c1-p50"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert reasons[0] == (
        "longhaul up used 20.0 ms CPU per request; PostgreSQL's CPU not visible from this machine"
    )


def test_a_target_met_by_far_gets_no_reason_and_one_without_cpu_figures_says_so() -> None:
    rows = {
        ("immediately", 16, "longhaul"): row(400.0) | cpu(4.0, 1.6),
        ("immediately", 16, SDK_MEMORY): row(100.0) | cpu(2.0, 0.2),
        ("stream", 16, "longhaul"): row(70.0, first_p50_ms=60.0),
        ("stream", 16, SDK_MEMORY): row(150.0, first_p50_ms=20.0),
    }
    run = parts(a2a=a2a(rows, nproc=2))
    met = decide(target("immediately-c16"), run)
    assert (met.outcome, met.close, met.why, met.reasons) == ("met", False, (), ())
    rows[("immediately", 16, SDK_MEMORY)] |= {"per_s_median": 380.0}  # within 30 %: told why
    assert decide(target("immediately-c16"), parts(a2a=a2a(rows, nproc=2))).reasons[1] == (
        "the in-memory server's 380 req/s at 4.0 ms per request needs 1.52 cores of longhaul up "
        "alone (2 on the machine); it used 1.60"
    )
    assert decide(target("stream-first-c16"), run).reasons == (
        f"CPU per request not measured in this run: the reason is not in its figures; see {STREAM_PROFILE}",
    )


# ------------------------------------------------------------------------------ properties


@given(
    ms=st.floats(min_value=0.5, max_value=200.0),
    cores=st.floats(min_value=0.0, max_value=1.9),
    per_s=st.floats(min_value=1.0, max_value=300.0),
)
def test_the_c1_bound_is_1000_over_the_cpu_per_request_and_one_gil_only_when_busy(
    ms: float, cores: float, per_s: float
) -> None:
    rows = {
        ("immediately", 1, "longhaul"): row(per_s) | cpu(ms, cores),
        ("immediately", 1, SDK_MEMORY): row(2 * per_s + 1) | cpu(1.0, 0.5),
    }
    verdict = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2)))
    assert verdict.outcome == "missed"
    assert f"1000/{ms:.1f} = {1000 / ms:.0f} req/s" in verdict.reasons[1]
    assert ("on one GIL" in verdict.reasons[1]) == (cores >= ONE_CORE)
    budget = 1000 / (2 * per_s + 1)
    assert verdict.reasons[2].endswith(
        f"{budget:.1f} ms of one core per request: {ms / budget:.1f}{TIMES} less than now"
    )


@given(nproc=st.sampled_from([1, 2, 4, 8]), share=st.floats(min_value=0.0, max_value=1.0))
def test_the_machine_is_called_saturated_exactly_when_its_cores_were_that_busy(
    nproc: int, share: float
) -> None:
    busy = round(share * nproc, 2)
    rows = {
        ("blocking", 16, "longhaul"): row(122.0) | cpu(8.0, 0.5),
        ("blocking", 128, "longhaul"): row(100.0) | cpu(8.0, 0.5, busy=busy),
    }
    reasons = decide(target("load-c128-blocking"), parts(a2a=a2a(rows, nproc=nproc))).reasons
    saturated = [r for r in reasons if "saturated" in r]
    assert bool(saturated) == (busy >= SATURATED * nproc)
    if saturated:
        assert saturated[0].startswith(f"the machine's {nproc} cores were saturated: {busy:.2f} busy")


# ------------------------------------------------------------------------------ where they are shown


def test_the_markdown_keeps_the_reasons_out_of_the_table_and_lists_them_under_it() -> None:
    rows = {
        ("immediately", 1, "longhaul"): row(57.0, 15.0, errors=2) | cpu(15.0, 0.86),
        ("immediately", 1, SDK_MEMORY): row(318.0, 2.3) | cpu(2.0, 0.64),
    }
    verdicts = decide_all(parts(a2a=a2a(rows, nproc=2)))
    text = markdown(verdicts, "heading")
    cell = next(line for line in text.splitlines() if line.startswith("| `immediately-c1` |"))
    assert cell.endswith("| **missed**: longhaul: 2 errors |")
    assert WHY_HEADING in text
    reasons = decide(target("immediately-c1"), parts(a2a=a2a(rows, nproc=2))).reasons
    assert f"- `immediately-c1` (missed): {'; '.join(reasons)}." in text.splitlines()
    listed = [line for line in text.splitlines() if line.startswith("- `")]
    assert [line.split("`")[1] for line in listed] == [v.target.id for v in verdicts if v.reasons]


def test_a2a_compare_sums_cpu_over_the_rounds_per_answered_request() -> None:
    def measured(
        requests: int, server: float, postgres: float | None, own: float | None = None, ended: int = 0
    ) -> Round:
        window = {"seconds": 2.0, "server": server, "postgres": postgres, "client": 0.2, "machine": 3.2}
        if own is not None:
            window |= {"server_postgres": own, "server_postgres_ended": float(ended)}
        return Round(seconds=[0.01] * requests, per_s=requests / 2.0, cpu=window)

    rounds = [measured(50, 0.8, 0.2, own=0.1), measured(150, 1.2, 0.4, own=0.3, ended=2)]
    assert cpu_summary(rounds) == {
        "cpu_window_seconds": 4.0,
        "cpu_ms_per_request": 10.0,
        "server_cores": 0.5,
        "server_postgres_cpu_ms_per_request": 2.0,
        "server_postgres_cores": 0.1,
        "server_postgres_ended": 2,
        "postgres_cpu_ms_per_request": 3.0,
        "postgres_cores": 0.15,
        "client_cpu_ms_per_request": 2.0,
        "client_cores": 0.1,
        "machine_busy_cores": 1.6,
    }
    blind = cpu_summary([measured(50, 0.8, None), measured(150, 1.2, 0.4, own=0.3)])
    assert (blind["postgres_cpu_ms_per_request"], blind["postgres_cores"]) == (None, None)
    assert (blind["server_postgres_cpu_ms_per_request"], blind["server_postgres_cores"]) == (None, None)
    assert "server_postgres_ended" not in blind
    assert cpu_summary([Round(seconds=[0.01] * 10, per_s=5.0)]) == {}
    summary = summarise(rounds)
    assert {"per_s_median", "p50_ms", "p99_ms", "errors", "refused"} <= set(summary)  # kept as before
    assert summary["cpu_ms_per_request"] == 10.0


# ------------------------------------------------------------------------------ the latency targets


def summary(p99: float, p50: float) -> dict[str, float]:
    return {"p99_ms": p99, "median_ms": p50}


def sse_run(
    streams: int, *, relay_p99: float, gateway_p99: float, raw_p99: float, busy: float | None
) -> dict[str, Any]:
    """``bench.sse_latency.run``'s results with one phase of ``streams``, its parts apart."""
    phase = {
        "streams": streams,
        "latency": {
            sse_latency.HEADLINE: summary(relay_p99 + gateway_p99, 3.4),
            sse_latency.TO_NATS: summary(relay_p99, 3.2),
            sse_latency.GATEWAY: summary(gateway_p99, 0.3),
            sse_latency.RAW: summary(raw_p99, 0.8),
        },
        "commits_per_s": 200.0,
        "rate_per_s": 200.0,
        "frames_missing": 0,
        "client_errors": [],
        "memory_per_stream_bytes": {"uss": 32 * 1024, "rss": 33 * 1024},
        "gateway_cpu_s_per_s": 0.146,
    } | ({} if busy is None else {"machine_busy_cores": busy})
    return {"machine": {"nproc": 2}, "phases": [phase]}


def test_an_sse_miss_names_each_part_s_tail_the_raw_nats_floor_and_the_busy_cores() -> None:
    run = parts(sse=sse_run(50, relay_p99=34.3, gateway_p99=12.8, raw_p99=12.3, busy=1.91))
    assert decide(target("sse-p99-50"), run).reasons == (
        (
            "each part apart (their percentiles do not add up): the relay's part (commit → NATS) p99 "
            "34.3 ms, p50 3.2 ms; the gateway's part (NATS → frame) p99 12.8 ms, p50 0.3 ms: the larger "
            "tail is the relay's part (commit → NATS)"
        ),
        (
            "raw NATS (one core NATS message between two processes, in the same run) p99 12.3 ms, 123% "
            "of the 10 ms target: at this load the machine's own floor is at or above the target"
        ),
        "the gateway was busy 0.15 of a core over the load",
        "the machine's 2 cores were 1.91 busy on average over the load (saturated)",
        "hop by hop: docs/benchmarks.md §10",
    )


def test_an_sse_tail_in_the_gateway_under_a_floor_below_the_target_says_both() -> None:
    run = parts(sse=sse_run(1000, relay_p99=9.0, gateway_p99=60.0, raw_p99=9.5, busy=1.2))
    why = decide(target("sse-p99-1000"), run).reasons
    assert why[0].endswith("the larger tail is the gateway's part (NATS → frame)")
    assert why[1] == (
        "raw NATS (one core NATS message between two processes, in the same run) p99 9.5 ms, 19% "
        "of the 50 ms target"
    )
    assert why[3:] == (
        "the machine's 2 cores were 1.20 busy on average over the load",
        "hop by hop: docs/benchmarks.md §14",
    )


def test_sse_results_from_before_the_busy_cores_were_read_leave_that_reason_out() -> None:
    run = parts(sse=sse_run(50, relay_p99=30.0, gateway_p99=5.0, raw_p99=4.0, busy=None))
    why = decide(target("sse-p99-50"), run).reasons
    assert len(why) == 4
    assert not any("busy on average" in reason for reason in why)


def test_a_webhook_miss_names_the_relay_s_and_the_dispatcher_s_tails_and_their_cpu() -> None:
    latency = {
        webhook_latency.HEADLINE: summary(175.4, 60.9),
        webhook_latency.TO_NATS: summary(55.0, 6.2),
        webhook_latency.DISPATCHER: summary(162.0, 52.7),
        webhook_latency.RAW: summary(22.1, 0.4),
    }
    results = {
        "machine": {"nproc": 2},
        "latency": latency,
        "tasks": 6000,
        "load_seconds": 30.0,
        "rate_per_s": 200.0,
        "webhooks_missing": 0,
        "process_cpu_seconds_from_load_start": {"relay": 10.0, "dispatcher-0": 10.08},
        "dispatcher_cpu_ms_per_delivery": 0.84,
        "machine_busy_cores": 1.7,
    }
    assert decide(target("webhook-p99"), parts(webhook=results)).reasons == (
        (
            "each part apart (their percentiles do not add up): the relay's part (commit → NATS) p99 "
            "55.0 ms, p50 6.2 ms; the dispatcher's part (NATS → COMPLETED delivered) p99 162.0 ms, p50 "
            "52.7 ms: the larger tail is the dispatcher's part (NATS → COMPLETED delivered)"
        ),
        (
            "raw NATS (one core NATS message between two processes, in the same run) p99 22.1 ms, 44% "
            "of the 50 ms target"
        ),
        (
            "from the load's start to its last delivery the relay used 0.33 and the dispatcher 0.34 of a "
            "core (per load second; 0.84 ms of CPU per delivery)"
        ),
        "the machine's 2 cores were 1.70 busy on average over the load",
        "hop by hop: docs/benchmarks.md §8",
    )
    latency[webhook_latency.HEADLINE] = summary(30.0, 10.0)  # met by far: no reason
    assert decide(target("webhook-p99"), parts(webhook=results)).reasons == ()
