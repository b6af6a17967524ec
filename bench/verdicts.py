"""The targets of issues 10 and 7, and how each one's verdict is computed from a run's results.

``TARGETS`` is the one list: every target has an id (the first column of the table at the top of
``docs/benchmarks.md``; ``tests/bench/test_verdicts.py`` keeps the two equal), the issue it is
from, its text, the part of ``bench.targets`` that measures it, the rule its verdict follows and
a function that reads longhaul's figure and the same run's baseline out of that part's results,
and, for most, one that tells from the same results why it was missed or came within 30 % of
its threshold (``bench.reasons``: CPU per request, the cores busy, 429s; or that the figures do
not tell, and where the profile is).

The results are the dicts the benchmarks return (``bench.a2a_compare.run`` and the others), by
part: ``{"a2a": {"results": ...}, "steps": {"results": {"two_workers": ..., ...}}, ...}``; a part
that failed holds ``{"error": "..."}`` instead of ``results``, a part not run is absent.
Nothing here starts a process or opens a connection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bench import reasons, sse_latency, webhook_latency
from bench.reasons import SDK, TIMES, Explain, a2a_row
from bench.sse_latency import HEADLINE as SSE_HEADLINE
from bench.sse_latency import RAW as SSE_RAW
from bench.webhook_latency import HEADLINE as WEBHOOK_HEADLINE
from bench.webhook_latency import RAW as WEBHOOK_RAW

CLOSE = 0.3
"""A value within 30 % of its threshold is not decided by one run on this machine (docs/benchmarks.md)."""
UNDECIDED = "(within 30 %: not decided by one run)"

Op = Literal[">=", "<", "<="]
Outcome = Literal["met", "missed", "not run"]


@dataclass(frozen=True)
class Rule:
    """What a verdict compares with ``threshold``: longhaul's figure, or its ratio to the baseline.

    ``noisy``: a measured rate or time, so a value within ``CLOSE`` of the threshold is not decided
    by one run; a count (errors, refusals) is exact.
    """

    on: Literal["figure", "ratio"]
    op: Op
    threshold: float
    unit: str = ""
    noisy: bool = True

    def holds(self, value: float) -> bool:
        if self.op == ">=":
            return value >= self.threshold
        if self.op == "<":
            return value < self.threshold
        return value <= self.threshold

    def close(self, value: float) -> bool:
        """Whether ``value`` is within ``CLOSE`` of the threshold (either side)."""
        if not self.noisy or self.threshold == 0:
            return False
        return abs(value - self.threshold) <= CLOSE * abs(self.threshold)

    def describe(self) -> str:
        what = "ratio" if self.on == "ratio" else "longhaul"
        unit = TIMES if self.on == "ratio" else f" {self.unit}".rstrip()
        return f"{what} {self.op} {self.threshold:g}{unit}"


@dataclass(frozen=True)
class Measured:
    """longhaul's figure and the same run's baseline, as numbers and as the table shows them.

    ``problems``: what the results tell went wrong in the measurement (errors, a rate not reached,
    frames missing); they come first in the verdict's ``why``.
    """

    figure: float | None
    baseline: float | None = None
    figure_text: str = ""
    baseline_text: str = ""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    id: str
    issue: int
    text: str
    part: str
    rule: Rule
    measure: Callable[[Mapping[str, Any]], Measured] = field(repr=False, compare=False)
    explain: Explain | None = field(default=None, repr=False, compare=False)
    """Why, from the part's results, when the verdict is missed or within 30 % (``bench.reasons``)."""


@dataclass(frozen=True)
class Verdict:
    target: Target
    outcome: Outcome
    measured: Measured | None = None
    ratio: float | None = None
    close: bool = False
    why: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    """The measured reasons (``Target.explain``), the last items of ``why``; before them, the problems."""

    @property
    def problems(self) -> tuple[str, ...]:
        """``why`` without the measured reasons: what went wrong in the measurement."""
        return self.why[: len(self.why) - len(self.reasons)]

    def text(self) -> str:
        """``met``, ``missed (within 30 %: not decided by one run): 3 errors``, ``not run``, ..."""
        words = self.outcome + (f" {UNDECIDED}" if self.close else "")
        return f"{words}: {'; '.join(self.why)}" if self.why else words

    def as_dict(self) -> dict[str, Any]:
        m = self.measured
        return {
            "id": self.target.id,
            "issue": self.target.issue,
            "target": self.target.text,
            "part": self.target.part,
            "rule": self.target.rule.describe(),
            "figure": None if m is None else m.figure,
            "figure_text": "" if m is None else m.figure_text,
            "baseline": None if m is None else m.baseline,
            "baseline_text": "" if m is None else m.baseline_text,
            "ratio": self.ratio,
            "outcome": self.outcome,
            "within_30_percent": self.close,
            "why": list(self.why),
            "reasons": list(self.reasons),
            "verdict": self.text(),
        }


def number(value: Any) -> float | None:
    """``value`` as a float; None for a missing or NaN figure."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def decide(target: Target, parts: Mapping[str, Mapping[str, Any]]) -> Verdict:
    """The verdict on ``target`` from a run's results by part."""
    part = parts.get(target.part)
    if part is None:
        return Verdict(target, "not run", why=(f"part {target.part} not run",))
    if "error" in part:
        return Verdict(target, "missed", why=(f"the part failed: {part['error']}",))
    measured = target.measure(part.get("results") or {})
    figure, baseline = number(measured.figure), number(measured.baseline)
    ratio = figure / baseline if figure is not None and baseline else None
    why = list(measured.problems)
    if baseline is None:
        why.append("baseline missing")
    value = ratio if target.rule.on == "ratio" else figure
    if value is None:
        if figure is None:
            why.insert(0, "no figure")
        return Verdict(target, "missed", measured, ratio, why=tuple(why))
    outcome: Outcome = "met" if target.rule.holds(value) else "missed"
    close = target.rule.close(value)
    told = (
        target.explain(part.get("results") or {}) if target.explain and (outcome == "missed" or close) else ()
    )
    return Verdict(target, outcome, measured, ratio, close, (*why, *told), told)


def decide_all(parts: Mapping[str, Mapping[str, Any]]) -> list[Verdict]:
    return [decide(target, parts) for target in TARGETS]


# ----------------------------------------------------------------------------- a2a_compare's results

MODE = {"blocking": "blocking", "immediately": "returnImmediately", "stream": "stream"}


def errors_of(row: Mapping[str, Any] | None, who: str = "longhaul") -> list[str]:
    if row is None or not row.get("errors"):
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in (row.get("error_kinds") or {}).items())
    return [f"{who}: {row['errors']} errors" + (f" ({kinds})" if kinds else "")]


def rate_text(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return ""
    return f"{row['per_s_median']:,.0f} req/s, p50 {row['p50_ms']:,.1f} ms"


def per_s_against(mode: str, c: int, server: str) -> Callable[[Mapping[str, Any]], Measured]:
    """longhaul's req/s of ``mode`` at ``c`` beside ``server``'s in the same run."""

    def measure(results: Mapping[str, Any]) -> Measured:
        ours, theirs = a2a_row(results, mode, c, "longhaul"), a2a_row(results, mode, c, server)
        return Measured(
            figure=None if ours is None else ours.get("per_s_median"),
            baseline=None if theirs is None else theirs.get("per_s_median"),
            figure_text=rate_text(ours),
            baseline_text=f"{SDK[server]} {rate_text(theirs)}" if theirs else "",
            problems=(*errors_of(ours), *errors_of(theirs, SDK[server])),
        )

    return measure


def blocking_c1_p50(results: Mapping[str, Any]) -> Measured:
    ours, theirs = (
        a2a_row(results, "blocking", 1, "longhaul"),
        a2a_row(results, "blocking", 1, "sdk-postgres"),
    )
    return Measured(
        figure=None if ours is None else ours.get("p50_ms"),
        baseline=None if theirs is None else theirs.get("p50_ms"),
        figure_text="" if ours is None else f"p50 {ours['p50_ms']:,.1f} ms",
        baseline_text="" if theirs is None else f"PostgreSQL store p50 {theirs['p50_ms']:,.1f} ms",
        problems=tuple(errors_of(ours)),
    )


def first_event(c: int) -> Callable[[Mapping[str, Any]], Measured]:
    """longhaul's stream first-event p50 at ``c`` beside the in-memory server's."""

    def measure(results: Mapping[str, Any]) -> Measured:
        ours, theirs = a2a_row(results, "stream", c, "longhaul"), a2a_row(results, "stream", c, "sdk-memory")

        def text(row: Mapping[str, Any] | None) -> str:
            return (
                "" if row is None or "first_p50_ms" not in row else f"first p50 {row['first_p50_ms']:,.1f} ms"
            )

        return Measured(
            figure=None if ours is None else ours.get("first_p50_ms"),
            baseline=None if theirs is None else theirs.get("first_p50_ms"),
            figure_text=text(ours),
            baseline_text=f"in-memory {text(theirs)}" if theirs else "",
            problems=(*errors_of(ours), *errors_of(theirs, "in-memory")),
        )

    return measure


def c128_against_c16(mode: str) -> Callable[[Mapping[str, Any]], Measured]:
    """longhaul's req/s at 128 clients beside its own at 16 in the same run."""

    def measure(results: Mapping[str, Any]) -> Measured:
        many, c16 = a2a_row(results, mode, 128, "longhaul"), a2a_row(results, mode, 16, "longhaul")
        return Measured(
            figure=None if many is None else many.get("per_s_median"),
            baseline=None if c16 is None else c16.get("per_s_median"),
            figure_text="" if many is None else f"{many['per_s_median']:,.0f} req/s at c=128",
            baseline_text="" if c16 is None else f"longhaul at c=16: {c16['per_s_median']:,.0f} req/s",
            problems=tuple(errors_of(many)),
        )

    return measure


def c128_p99(results: Mapping[str, Any]) -> Measured:
    ours = a2a_row(results, "immediately", 128, "longhaul")
    theirs = a2a_row(results, "immediately", 128, "sdk-memory")
    return Measured(
        figure=None if ours is None else ours.get("p99_ms"),
        baseline=None if theirs is None else theirs.get("p99_ms"),
        figure_text="" if ours is None else f"p99 {ours['p99_ms']:,.0f} ms",
        baseline_text="" if theirs is None else f"in-memory p99 {theirs['p99_ms']:,.0f} ms",
        problems=tuple(errors_of(ours)),
    )


def c128_counts(key: str, noun: str, when_none: str = "") -> Callable[[Mapping[str, Any]], Measured]:
    """``key`` (errors, refused) of every mode at 128 clients, summed: longhaul's and in-memory's.

    ``when_none``: the problem to name when longhaul's count is 0.
    """

    def measure(results: Mapping[str, Any]) -> Measured:
        def count(server: str) -> tuple[int | None, str]:
            rows = {m: a2a_row(results, m, 128, server) for m in MODE}
            found = {m: int(r.get(key, 0)) for m, r in rows.items() if r is not None}
            if not found:
                return None, ""
            each = ", ".join(f"{MODE[m]} {n:,}" for m, n in found.items())
            return sum(found.values()), f"{sum(found.values()):,} {noun} ({each})"

        ours, ours_text = count("longhaul")
        theirs, theirs_text = count("sdk-memory")
        problems = [when_none] if when_none and ours == 0 else []
        overflows = results.get("listen_overflows")
        if key == "errors" and overflows:  # the kernel's counter is the whole machine's
            problems.append(f"{overflows} listen overflows on the machine over the run")
        baseline_text = f"in-memory {theirs_text}" if theirs_text else ""
        return Measured(ours, theirs, ours_text, baseline_text, tuple(problems))

    return measure


# --------------------------------------------------------------------- sse_latency's and the others'

REACHED = 0.9
"""A load that reached less than this share of its asked rate did not measure the target's load."""
KIB = 1024


def sse_phase(streams: int) -> Callable[[Mapping[str, Any]], Measured]:
    """Commit -> SSE frame p99 of the first phase with ``streams`` open streams, beside raw NATS p99."""

    def measure(results: Mapping[str, Any]) -> Measured:
        phase = next((p for p in results.get("phases", []) if p.get("streams") == streams), None)
        if phase is None:
            return Measured(None, problems=(f"no phase of {streams} streams",))
        headline, raw = phase["latency"][SSE_HEADLINE], phase["latency"][SSE_RAW]
        problems = []
        if phase["commits_per_s"] < REACHED * phase["rate_per_s"]:
            problems.append(f"{phase['commits_per_s']:g} commits/s of the {phase['rate_per_s']:g} asked")
        if phase["frames_missing"]:
            problems.append(f"{phase['frames_missing']} frames missing")
        if phase["client_errors"]:
            problems.append(f"{len(phase['client_errors'])} client errors")
        text = f"p99 {headline['p99_ms']:,.1f} ms, p50 {headline['median_ms']:,.1f} ms"
        if streams >= 1000:
            text += f"; {phase['memory_per_stream_bytes']['uss'] / KIB:,.1f} KiB per open stream (USS)"
        return Measured(
            figure=headline["p99_ms"],
            baseline=raw["p99_ms"],
            figure_text=text,
            baseline_text=f"raw NATS p99 {raw['p99_ms']:,.1f} ms",
            problems=tuple(problems),
        )

    return measure


PLAIN_CLIENTS = 16
"""The plain-psycopg client count nearest the connections of two workers (8 each; §2 of the docs)."""


def steps(run: str) -> Callable[[Mapping[str, Any]], Measured]:
    """StepCompleted/s of one ``bench.step_throughput`` run, beside plain psycopg at 16 clients."""

    def measure(results: Mapping[str, Any]) -> Measured:
        one = results.get(run)
        if one is None:
            return Measured(None, problems=(f"no {run.replace('_', ' ')} run",))
        if "error" in one:
            return Measured(None, problems=(f"the run failed: {one['error']}",))
        plain = next((b for b in one["plain_psycopg"] if b["clients"] == PLAIN_CLIENTS), None)
        longhaul = one["longhaul"]
        figure = longhaul["steps_per_s_first_to_last"]
        runners = f"{longhaul['workers']} {TIMES} {longhaul['concurrency_per_worker']}"
        return Measured(
            figure=figure,
            baseline=None if plain is None else plain["commits_per_s"],
            figure_text=f"{figure:,.0f} steps/s ({runners})",
            baseline_text=""
            if plain is None
            else f"plain psycopg, 16 clients: {plain['commits_per_s']:,} commits/s",
        )

    return measure


def webhook(results: Mapping[str, Any]) -> Measured:
    if "latency" not in results:
        return Measured(None)
    headline, raw = results["latency"][WEBHOOK_HEADLINE], results["latency"][WEBHOOK_RAW]
    problems = []
    reached = results["tasks"] / results["load_seconds"] if results["load_seconds"] else 0.0
    if reached < REACHED * results["rate_per_s"]:
        problems.append(f"{reached:,.0f} tasks/s of the {results['rate_per_s']:g} asked")
    if results["webhooks_missing"]:
        problems.append(f"{results['webhooks_missing']} webhooks missing")
    return Measured(
        figure=headline["p99_ms"],
        baseline=raw["p99_ms"],
        figure_text=f"p99 {headline['p99_ms']:,.1f} ms, p50 {headline['median_ms']:,.1f} ms",
        baseline_text=f"raw NATS p99 {raw['p99_ms']:,.1f} ms",
        problems=tuple(problems),
    )


TARGETS: tuple[Target, ...] = (
    Target(
        "immediately-c1",
        10,
        "returnImmediately c=1 ≥ a2a-sdk in-memory req/s",
        "a2a",
        Rule("ratio", ">=", 1.0),
        per_s_against("immediately", 1, "sdk-memory"),
        reasons.c1_throughput("immediately", "sdk-memory", 1.0),
    ),
    Target(
        "immediately-c16",
        10,
        "returnImmediately c=16 ≥ a2a-sdk in-memory req/s",
        "a2a",
        Rule("ratio", ">=", 1.0),
        per_s_against("immediately", 16, "sdk-memory"),
        reasons.loaded("immediately", 16, "sdk-memory", 1.0),
    ),
    Target(
        "blocking-c1",
        10,
        f"blocking c=1 ≥ 2{TIMES} a2a-sdk PostgreSQL store req/s",
        "a2a",
        Rule("ratio", ">=", 2.0),
        per_s_against("blocking", 1, "sdk-postgres"),
        reasons.c1_throughput("blocking", "sdk-postgres", 2.0),
    ),
    Target(
        "blocking-c1-p50",
        10,
        "blocking c=1 p50 < 8 ms",
        "a2a",
        Rule("figure", "<", 8.0, "ms"),
        blocking_c1_p50,
        reasons.c1_latency(8.0),
    ),
    Target(
        "blocking-c16",
        10,
        f"blocking c=16 ≥ 2{TIMES} a2a-sdk PostgreSQL store req/s",
        "a2a",
        Rule("ratio", ">=", 2.0),
        per_s_against("blocking", 16, "sdk-postgres"),
        reasons.loaded("blocking", 16, "sdk-postgres", 2.0),
    ),
    Target(
        "stream-first-c1",
        10,
        "stream c=1: first event p50 no later than in-memory's",
        "a2a",
        Rule("ratio", "<=", 1.0),
        first_event(1),
        reasons.first_event(1),
    ),
    Target(
        "stream-first-c16",
        10,
        "stream c=16: first event p50 no later than in-memory's",
        "a2a",
        Rule("ratio", "<=", 1.0),
        first_event(16),
        reasons.first_event(16),
    ),
    Target(
        "sse-p99-50",
        10,
        "commit → SSE frame p99 < 10 ms at 200 commits/s, 50 streams",
        "sse",
        Rule("figure", "<", sse_latency.TARGET_P99_MS, "ms"),
        sse_phase(50),
        reasons.sse_tail(50, "§10"),
    ),
    Target(
        "sse-p99-1000",
        10,
        "1,000 open streams on one gateway: commit → SSE frame p99 < 50 ms; memory per stream reported",
        "sse",
        Rule("figure", "<", sse_latency.TARGET_P99_MANY_MS, "ms"),
        sse_phase(1000),
        reasons.sse_tail(1000, "§14"),
    ),
    Target(
        "steps-2w",
        10,
        "step commits, 2 worker processes ≥ 2,000 steps/s",
        "steps",
        Rule("figure", ">=", 2000.0, "steps/s"),
        steps("two_workers"),
        reasons.not_told("§2"),
    ),
    Target(
        "steps-2w-half-plain",
        10,
        "step commits, 2 worker processes ≥ ½ plain psycopg at the same connections",
        "steps",
        Rule("ratio", ">=", 0.5),
        steps("two_workers"),
        reasons.not_told("§2"),
    ),
    Target(
        "steps-1w",
        10,
        "step commits, 1 worker process ≥ 2,500 steps/s",
        "steps",
        Rule("figure", ">=", 2500.0, "steps/s"),
        steps("one_worker"),
        reasons.not_told("§2"),
    ),
    Target(
        "load-c128-immediately",
        10,
        "128 clients, returnImmediately: req/s ≥ the c=16 figure",
        "a2a",
        Rule("ratio", ">=", 1.0),
        c128_against_c16("immediately"),
        reasons.loaded("immediately", 128),
    ),
    Target(
        "load-c128-blocking",
        10,
        "128 clients, blocking: req/s ≥ the c=16 figure",
        "a2a",
        Rule("ratio", ">=", 1.0),
        c128_against_c16("blocking"),
        reasons.loaded("blocking", 128),
    ),
    Target(
        "load-c128-p99",
        10,
        "128 clients: returnImmediately p99 < 1 s",
        "a2a",
        Rule("figure", "<", 1000.0, "ms"),
        c128_p99,
        reasons.loaded("immediately", 128),
    ),
    Target(
        "load-c128-no-drop",
        10,
        "128 clients: no connection dropped (no request failed)",
        "a2a",
        Rule("figure", "<=", 0.0, "errors", noisy=False),
        c128_counts("errors", "errors"),
    ),
    Target(
        "load-overload-429",
        10,
        "past capacity (128 clients) the overload answer, 429, not a queue: refusals counted",
        "a2a",
        Rule("figure", ">=", 1.0, "refusals", noisy=False),
        c128_counts("refused", "answered 429", "no 429 at 128 clients: queued, or not past capacity"),
    ),
    Target(
        "webhook-p99",
        7,
        "commit → webhook COMPLETED delivered p99 < 50 ms at 200 tasks/s",
        "webhook",
        Rule("figure", "<", webhook_latency.TARGET_P99_MS, "ms"),
        webhook,
        reasons.webhook_tail(),
    ),
)
