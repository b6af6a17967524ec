"""The targets: what each one means, the figure and the same-run baseline it reads, its line.

``TARGETS`` is the one list (the table in ``docs/benchmarks.md`` has one row per id). Each target
names the part of the run that measures it (``bench.__main__``), its rule (longhaul's figure, or
its ratio to the baseline, against a threshold) and a function that reads the figure and the
baseline out of that part's results. A measured value within 30 % of its threshold is marked as
not decided by one run: on a shared machine of two cores, runs move by that much.

Nothing here starts a process or opens a connection.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bench import sse_latency, webhook_latency
from bench.nats_watch import RAW

CLOSE = 0.3
UNDECIDED = "(within 30 %: not decided by one run)"
TIMES = "\u00d7"
REACHED = 0.9
"""A load that reached less than this share of its rate did not measure the target's load."""

Outcome = Literal["met", "missed", "not run"]
Results = Mapping[str, Any]
OPS = {">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Rule:
    """``on`` (longhaul's figure, or its ratio to the baseline) ``op`` ``threshold``.

    ``noisy``: a measured rate or time, so a value within ``CLOSE`` of the threshold is not decided
    by one run; a count (errors, refusals) is exact.
    """

    on: Literal["figure", "ratio"]
    op: Literal[">=", "<", "<="]
    threshold: float
    unit: str = ""
    noisy: bool = True

    def holds(self, value: float) -> bool:
        return bool(OPS[self.op](value, self.threshold))

    def close(self, value: float) -> bool:
        return self.noisy and abs(value - self.threshold) <= CLOSE * abs(self.threshold)

    def describe(self) -> str:
        unit = TIMES if self.on == "ratio" else f" {self.unit}".rstrip()
        return f"{'ratio' if self.on == 'ratio' else 'longhaul'} {self.op} {self.threshold:g}{unit}"


@dataclass(frozen=True)
class Measured:
    """longhaul's figure and the baseline of the same run, as numbers and as the table shows them;
    ``problems``: what went wrong in the measurement (errors, a rate not reached)."""

    figure: float | None
    baseline: float | None = None
    figure_text: str = ""
    baseline_text: str = ""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    id: str
    text: str
    part: str
    rule: Rule
    measure: Callable[[Results], Measured] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Verdict:
    target: Target
    outcome: Outcome
    measured: Measured | None = None
    ratio: float | None = None
    close: bool = False
    why: tuple[str, ...] = ()

    def text(self) -> str:
        """``met``, ``missed (within 30 %: not decided by one run): 3 errors``, ``not run: ...``"""
        words = self.outcome + (f" {UNDECIDED}" if self.close else "")
        return f"{words}: {'; '.join(self.why)}" if self.why else words

    def as_dict(self) -> dict[str, Any]:
        m = self.measured or Measured(None)
        return {
            "id": self.target.id,
            "target": self.target.text,
            "rule": self.target.rule.describe(),
            "figure": m.figure,
            "figure_text": m.figure_text,
            "baseline": m.baseline,
            "baseline_text": m.baseline_text,
            "ratio": self.ratio,
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
        return Verdict(target, "missed", measured, ratio, why=tuple(["no figure"] * (figure is None) + why))
    outcome: Outcome = "met" if target.rule.holds(value) else "missed"
    return Verdict(target, outcome, measured, ratio, target.rule.close(value), tuple(why))


def decide_all(parts: Mapping[str, Mapping[str, Any]]) -> list[Verdict]:
    return [decide(target, parts) for target in TARGETS]


# ----------------------------------------------------------------------------- the request path

MODE = {"blocking": "blocking", "immediately": "returnImmediately", "stream": "stream"}
SERVER = {"sdk-memory": "in-memory", "sdk-postgres": "PostgreSQL store", "longhaul": "longhaul"}
ANSWER = "longhaul-answer"


def a2a_row(results: Results, mode: str, c: int, server: str) -> Mapping[str, Any]:
    """One server's summary in ``mode`` at ``c`` clients; empty when it was not measured."""
    row = (results.get("results") or {}).get(f"{mode}@c={c}", {}).get(server)
    return row if isinstance(row, dict) else {}


def errors_of(row: Mapping[str, Any], who: str = "longhaul") -> list[str]:
    if not row.get("errors"):
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in (row.get("error_kinds") or {}).items())
    return [f"{who}: {row['errors']} errors" + (f" ({kinds})" if kinds else "")]


SHOWN = {"first_p50_ms": "first p50 {first_p50_ms:,.1f} ms", "p99_ms": "p99 {p99_ms:,.0f} ms"}
"""How a summary is shown by the figure read from it; any other figure: its rate and p50."""
RATE_SHOWN = "{per_s_median:,.0f} req/s, p50 {p50_ms:,.1f} ms"


def shown(row: Mapping[str, Any], key: str) -> str:
    return SHOWN.get(key, RATE_SHOWN).format_map(row) if key in row else ""


def against(
    mode: str, c: int, server: str, key: str = "per_s_median", ours: str = "longhaul", their_c: int = 0
) -> Callable[[Results], Measured]:
    """``ours``'s ``key`` in ``mode`` at ``c`` beside ``server``'s in the same run (at ``their_c``
    clients when given). The durable answer (``longhaul-answer``) is shown with the whole ``up``'s
    figure beside it."""
    label = SERVER[server] + (f" at c={their_c}:" if their_c else "")

    def measure(results: Results) -> Measured:
        mine, theirs = a2a_row(results, mode, c, ours), a2a_row(results, mode, their_c or c, server)
        text = shown(mine, key)
        if ours == ANSWER and (whole := a2a_row(results, mode, c, "longhaul")):
            text += f" (whole up: {shown(whole, key)})"
        their_text = f"{label} {shown(theirs, key)}" if theirs else ""
        problems = (*errors_of(mine), *errors_of(theirs, SERVER[server]))
        return Measured(mine.get(key), theirs.get(key), text, their_text, problems)

    return measure


def cpu_per_task(results: Results) -> Measured:
    """The whole ``up``'s CPU per blocking echo task at c=1 (its process and its PostgreSQL
    backends) beside the in-memory server's CPU per request."""
    ours, theirs = a2a_row(results, "blocking", 1, "longhaul"), a2a_row(results, "blocking", 1, "sdk-memory")
    own = number(ours.get("cpu_ms_per_request"))
    backends = number(ours.get("server_postgres_cpu_ms_per_request"))
    figure = None if own is None or backends is None else own + backends
    baseline = number(theirs.get("cpu_ms_per_request"))
    text = "" if figure is None else f"{figure:.2f} ms ({own:.2f} up + {backends:.2f} its PostgreSQL)"
    their_text = "" if baseline is None else f"in-memory {baseline:.2f} ms per request"
    return Measured(figure, baseline, text, their_text, tuple(errors_of(ours)))


def c128_counts(key: str, noun: str, when_none: str = "") -> Callable[[Results], Measured]:
    """``key`` (errors, refused) of every mode at 128 clients, summed: longhaul's and in-memory's;
    ``when_none``: the problem to name when longhaul's count is 0."""

    def measure(results: Results) -> Measured:
        def count(server: str, label: str = "") -> tuple[int | None, str]:
            found = {m: int(r.get(key, 0)) for m in MODE if (r := a2a_row(results, m, 128, server))}
            if not found:
                return None, ""
            each = ", ".join(f"{MODE[m]} {n:,}" for m, n in found.items())
            return sum(found.values()), f"{label}{sum(found.values()):,} {noun} ({each})"

        ours, ours_text = count("longhaul")
        theirs, theirs_text = count("sdk-memory", "in-memory ")
        problems = [when_none] if when_none and ours == 0 else []
        if key == "errors" and results.get("listen_overflows"):  # the kernel's, the whole machine's
            problems.append(f"{results['listen_overflows']} listen overflows on the machine over the run")
        return Measured(ours, theirs, ours_text, theirs_text, tuple(problems))

    return measure


# ----------------------------------------------------------------------------- the other parts


def latency_p99(latency: Mapping[str, Any], headline: str, problems: list[str], more: str = "") -> Measured:
    """``headline``'s p99 beside raw NATS p99 (``more``: said after the figure)."""
    mine, raw = latency[headline], latency[RAW]
    text = f"p99 {mine['p99_ms']:,.1f} ms, p50 {mine['median_ms']:,.1f} ms{more}"
    raw_text = f"raw NATS p99 {raw['p99_ms']:,.1f} ms"
    return Measured(mine["p99_ms"], raw["p99_ms"], text, raw_text, tuple(problems))


def sse_phase(streams: int) -> Callable[[Results], Measured]:
    """Commit -> SSE frame p99 with ``streams`` open streams, beside raw NATS p99."""

    def measure(results: Results) -> Measured:
        phase = next((p for p in results.get("phases", []) if p.get("streams") == streams), None)
        if phase is None:
            return Measured(None, problems=(f"no phase of {streams} streams",))
        problems = []
        if phase["commits_per_s"] < REACHED * phase["rate_per_s"]:
            problems.append(f"{phase['commits_per_s']:g} commits/s of the {phase['rate_per_s']:g} asked")
        if phase["frames_missing"]:
            problems.append(f"{phase['frames_missing']} frames missing")
        if phase["client_errors"]:
            problems.append(f"{len(phase['client_errors'])} client errors")
        memory = phase["memory_per_stream_bytes"]["uss"] / 1024
        more = f"; {memory:,.1f} KiB per open stream (USS)" if streams >= 1000 else ""
        return latency_p99(phase["latency"], sse_latency.HEADLINE, problems, more)

    return measure


PLAIN_CLIENTS = 16
"""The plain-psycopg client count nearest the connections of two workers."""


def steps(run: str) -> Callable[[Results], Measured]:
    """StepCompleted/s of one step run, beside plain psycopg at 16 clients."""

    def measure(results: Results) -> Measured:
        one = (results.get("runs") or {}).get(run)
        if one is None:
            return Measured(None, problems=(f"no {run.replace('_', ' ')} run",))
        plain = {b["clients"]: b for b in results.get("plain_psycopg", [])}.get(PLAIN_CLIENTS, {})
        figure = one["steps_per_s_first_to_last"]
        text = f"{figure:,.0f} steps/s ({one['workers']} {TIMES} {one['concurrency_per_worker']})"
        plain_text = f"plain psycopg, 16 clients: {plain['commits_per_s']:,} commits/s" if plain else ""
        return Measured(figure, plain.get("commits_per_s"), text, plain_text)

    return measure


def webhook(results: Results) -> Measured:
    if "latency" not in results:
        return Measured(None)
    problems = []
    reached = results["tasks"] / results["load_seconds"] if results["load_seconds"] else 0.0
    if reached < REACHED * results["rate_per_s"]:
        problems.append(f"{reached:,.0f} tasks/s of the {results['rate_per_s']:g} asked")
    if results["webhooks_missing"]:
        problems.append(f"{results['webhooks_missing']} webhooks missing")
    return latency_p99(results["latency"], webhook_latency.HEADLINE, problems)


def resume(results: Results) -> Measured:
    """The slowest kill -> next commit with a standby worker, beside its lease + 1 s (a worker
    started after the kill adds its start-up: reported in the results, not held to the line)."""
    cases = [c for c in results.get("summary") or [] if c["mode"] == "standby"]
    if not cases:
        return Measured(None)
    worst = max(cases, key=lambda c: c["kill_to_first_commit_max_s"] / c["reference_lease_plus_1s"])
    figure, reference = worst["kill_to_first_commit_max_s"], worst["reference_lease_plus_1s"]
    text = f"{figure:.2f} s ({worst['lease_s']:g} s lease, {worst['mode']})"
    return Measured(figure, reference, text, f"lease + 1 s: {reference:g} s")


def files(figure: str, baseline: str, unit: str, baseline_name: str) -> Callable[[Results], Measured]:
    """One figure of the files part beside its baseline (``peak``: the larger memory peak)."""

    def measure(results: Results) -> Measured:
        if "bytes" not in results:
            return Measured(None)
        ours = max(results["peak_above_idle_mb"].values()) if figure == "peak" else results[figure]
        if isinstance(ours, dict):  # GetTask: the big file's task beside an echo task's
            ours, theirs = ours["big_file"], ours["echo"]
        else:
            theirs = results["idle_rss_mb"] if baseline == "idle" else results[baseline]
        text = f"{ours:,.1f} {unit} ({results['bytes'] / 2**30:g} GiB)"
        return Measured(ours, theirs, text, f"{baseline_name}: {theirs:,.1f} {unit}")

    return measure


MEANING = {
    "immediately-c1": "returnImmediately, 1 client: the durable answer ≥ in-memory req/s",
    "stream-first-c1": "stream, 1 client: the durable answer's first event p50 no later than in-memory's",
    "cpu-per-task-c1": f"CPU per durable echo task (up and its PostgreSQL, c=1) ≤ 2{TIMES} in-memory's",
    "immediately-c16": "returnImmediately, 16 clients ≥ in-memory req/s",
    "blocking-c1": f"blocking, 1 client ≥ 2{TIMES} the PostgreSQL store's req/s",
    "blocking-c1-p50": "blocking, 1 client: p50 < 8 ms",
    "blocking-c16": f"blocking, 16 clients ≥ 2{TIMES} the PostgreSQL store's req/s",
    "stream-first-c16": "stream, 16 clients: first event p50 no later than in-memory's",
    "sse-p99-50": "commit → SSE frame p99 < 10 ms at 200 commits/s, 50 streams",
    "sse-p99-1000": "1,000 open streams on one gateway: commit → SSE frame p99 < 50 ms; memory per stream",
    "steps-2w": "step commits, 2 worker processes ≥ 2,000 steps/s",
    "steps-2w-half-plain": "step commits, 2 worker processes ≥ ½ plain psycopg at 16 connections",
    "steps-1w": "step commits, 1 worker process ≥ 2,500 steps/s",
    "load-c128-immediately": "128 clients, returnImmediately: req/s ≥ its own at 16",
    "load-c128-blocking": "128 clients, blocking: req/s ≥ its own at 16",
    "load-c128-p99": "128 clients: returnImmediately p99 < 1 s",
    "load-c128-no-drop": "128 clients: no connection dropped (no request failed)",
    "load-overload-429": "past capacity (128 clients) the overload answer, 429, not a queue",
    "webhook-p99": "commit → webhook COMPLETED delivered p99 < 50 ms at 200 tasks/s",
    "resume-after-kill": "a worker killed mid-step: kill → the next commit ≤ lease + 1 s (standby)",
    "files-download": "a 1 GiB artifact downloaded with curl ≥ ½ cp's MiB/s on the same disk",
    "files-upload": "a 1 GiB upload (POST /a2a/files, curl) ≥ ½ cp's MiB/s on the same disk",
    "files-memory": "up's memory while it writes and serves 1 GiB: < 150 MB above idle",
    "files-get-task": "GetTask of the 1 GiB task no slower than of an echo task (median of 200)",
}
"""What each target means, by id, in the order of the table."""

LINES: dict[str, tuple[str, Rule, Callable[[Results], Measured]]] = {
    "immediately-c1": ("a2a", Rule("ratio", ">=", 1.0), against("immediately", 1, "sdk-memory", ours=ANSWER)),
    "stream-first-c1": (
        "a2a",
        Rule("ratio", "<=", 1.0),
        against("stream", 1, "sdk-memory", "first_p50_ms", ours=ANSWER),
    ),
    "cpu-per-task-c1": ("a2a", Rule("ratio", "<=", 2.0), cpu_per_task),
    "immediately-c16": ("a2a", Rule("ratio", ">=", 1.0), against("immediately", 16, "sdk-memory")),
    "blocking-c1": ("a2a", Rule("ratio", ">=", 2.0), against("blocking", 1, "sdk-postgres")),
    "blocking-c1-p50": (
        "a2a",
        Rule("figure", "<", 8.0, "ms"),
        against("blocking", 1, "sdk-postgres", "p50_ms"),
    ),
    "blocking-c16": ("a2a", Rule("ratio", ">=", 2.0), against("blocking", 16, "sdk-postgres")),
    "stream-first-c16": (
        "a2a",
        Rule("ratio", "<=", 1.0),
        against("stream", 16, "sdk-memory", "first_p50_ms"),
    ),
    "sse-p99-50": ("sse", Rule("figure", "<", 10.0, "ms"), sse_phase(50)),
    "sse-p99-1000": ("sse", Rule("figure", "<", 50.0, "ms"), sse_phase(1000)),
    "steps-2w": ("steps", Rule("figure", ">=", 2000.0, "steps/s"), steps("two_workers")),
    "steps-2w-half-plain": ("steps", Rule("ratio", ">=", 0.5), steps("two_workers")),
    "steps-1w": ("steps", Rule("figure", ">=", 2500.0, "steps/s"), steps("one_worker")),
    "load-c128-immediately": (
        "a2a",
        Rule("ratio", ">=", 1.0),
        against("immediately", 128, "longhaul", their_c=16),
    ),
    "load-c128-blocking": ("a2a", Rule("ratio", ">=", 1.0), against("blocking", 128, "longhaul", their_c=16)),
    "load-c128-p99": (
        "a2a",
        Rule("figure", "<", 1000.0, "ms"),
        against("immediately", 128, "sdk-memory", "p99_ms"),
    ),
    "load-c128-no-drop": (
        "a2a",
        Rule("figure", "<=", 0.0, "errors", noisy=False),
        c128_counts("errors", "errors"),
    ),
    "load-overload-429": (
        "a2a",
        Rule("figure", ">=", 1.0, "refusals", noisy=False),
        c128_counts("refused", "answered 429", "no 429 at 128 clients: queued, or not past capacity"),
    ),
    "webhook-p99": ("webhook", Rule("figure", "<", 50.0, "ms"), webhook),
    "resume-after-kill": ("resume", Rule("ratio", "<=", 1.0), resume),
    "files-download": ("files", Rule("ratio", ">=", 0.5), files("download_mib_s", "cp_mib_s", "MiB/s", "cp")),
    "files-upload": ("files", Rule("ratio", ">=", 0.5), files("upload_mib_s", "cp_mib_s", "MiB/s", "cp")),
    "files-memory": ("files", Rule("figure", "<", 150.0, "MB"), files("peak", "idle", "MB", "idle")),
    "files-get-task": ("files", Rule("ratio", "<=", 1.0), files("get_task_ms", "", "ms", "echo task")),
}
"""Each target's part, rule and measure."""

TARGETS = tuple(Target(tid, MEANING[tid], *line) for tid, line in LINES.items())
