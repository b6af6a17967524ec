"""Every target of issues 10 and 7 in one run: each figure beside its same-run baseline, and a verdict.

One command from a clean clone (the machine's PostgreSQL and NATS are all it needs, as for the
other benchmarks) runs the benchmarks the targets need, by calling their own ``run``:

- ``a2a``: ``bench.a2a_compare``, longhaul, the a2a-sdk in-memory and PostgreSQL servers, all three
  modes at c = 1, 16, 64 and 128 (``--client-per-caller``: at 128 callers one shared httpx pool is
  the bottleneck, docs/benchmarks.md §13), rounds interleaved;
- ``sse``: ``bench.sse_latency`` at 200 commits/s with 50 and with 1,000 open streams (raw NATS);
- ``steps``: ``bench.step_throughput`` with 2 workers x 32 and 1 worker x 64 (plain psycopg);
- ``webhook``: ``bench.webhook_latency`` at 200 tasks/s, the receiver in its own process (raw NATS).

Each part starts once the whole machine is quiet (under 0.3 of a core busy over half a second;
``bench.process_cpu.settle_machine``, at most ``SETTLE_S``), so that what the part before left
running (PostgreSQL's checkpoint after the step runs' commits, processes still exiting) does not
run in its window; the seconds it waited are kept with the part (``settled_s``).

Then it prints the verdict table (``bench.verdicts``: one row per target, longhaul's figure, the
baseline, the ratio, met or missed and why: what went wrong in the measurement, and for a target
missed or within 30 % the reason its figures tell, ``bench.reasons``) and writes
``bench/results/targets.json``
(``targets.quick.json``, ``targets.<tag>.json``): every part's results, the machine, the load
average before and after each part, the git commit. ``--markdown FILE`` writes the table as
markdown, for the top of docs/benchmarks.md: the table (its verdict cells without the measured
reasons) and under it "Why the misses", one entry per target missed or within 30 %.

    uv run python -m bench.targets                 # about 20 minutes by its sizes
    uv run python -m bench.targets --quick         # a few minutes: every part at smaller sizes, not a verdict
    uv run python -m bench.targets --parts sse,webhook --tag T --markdown /tmp/targets.md
    uv run python -m bench.targets --decide bench/results/targets.json --markdown /tmp/t.md  # no run

Run it inside the benchmark lock (``flock /tmp/bench.lock ...``) on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import a2a_compare, sse_latency, step_throughput, webhook_latency
from bench.common import base_parser, machine_info, table, utc_now, write_results
from bench.process_cpu import settle_machine
from bench.reasons import TIMES
from bench.verdicts import TARGETS, UNDECIDED, Verdict, decide_all

PARTS = ("a2a", "sse", "steps", "webhook")
SETTLE_S = 60.0
"""The longest a part waits for the machine to be quiet after the part before (``settle_machine``)."""
STEP_RUNS = {
    "two_workers": ["--workers", "2", "--concurrency", "32"],
    "one_worker": ["--workers", "1", "--concurrency", "64"],
}

SIZES: dict[str, dict[str, list[str]]] = {
    "full": {
        "a2a": ["--concurrency", "1", "16", "64", "128", "--rounds", "3", "--seconds", "5"],
        "sse": ["--streams", "50", "1000", "--seconds", "30"],
        "steps": ["--tasks", "2000", "--baseline-seconds", "5"],
        "webhook": ["--seconds", "30"],
    },
    "quick": {
        "a2a": ["--concurrency", "1", "16", "128", "--rounds", "1", "--seconds", "2"],
        "sse": ["--streams", "50", "1000", "--seconds", "8"],
        "steps": ["--tasks", "400", "--baseline-seconds", "2"],
        "webhook": ["--seconds", "8"],
    },
}
"""Each part's size flags; the flags every run of a part has are in ``argv``."""


def argv(part: str, args: argparse.Namespace) -> list[str]:
    """The command line ``part``'s benchmark is run with (its JSON not written: this run's holds it)."""
    words = [
        "--database-url",
        args.database_url,
        "--no-json",
        *SIZES["quick" if args.quick else "full"][part],
    ]
    if part == "a2a":
        return [*words, "--client-per-caller"]
    if part == "sse":
        return [*words, "--nats-url", args.nats_url, "--rate", "200"]
    if part == "webhook":
        return [*words, "--nats-url", args.nats_url, "--rate", "200", "--receiver", "process"]
    return words


def run_a2a(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["LONGHAUL_NATS_URL"] = args.nats_url  # a2a_compare hands it to `longhaul up`
    return a2a_compare.run(a2a_compare.parse_args(argv("a2a", args)))


def run_sse(args: argparse.Namespace) -> dict[str, Any]:
    return sse_latency.run(sse_latency.arguments(argv("sse", args)))


def run_steps(args: argparse.Namespace) -> dict[str, Any]:
    """Both step runs; one that fails is recorded as such and the other still runs."""
    runs: dict[str, Any] = {}
    for name, words in STEP_RUNS.items():
        print(f"\n[targets] steps: {name.replace('_', ' ')}", flush=True)
        try:
            runs[name] = step_throughput.run(step_throughput.arguments([*argv("steps", args), *words]))
        except Exception as error:  # noqa: BLE001 - recorded: the verdict says why
            traceback.print_exc()
            runs[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
    return runs


def run_webhook(args: argparse.Namespace) -> dict[str, Any]:
    return webhook_latency.run(webhook_latency.arguments(argv("webhook", args)))


RUNS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "a2a": run_a2a,
    "sse": run_sse,
    "steps": run_steps,
    "webhook": run_webhook,
}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def elapsed(since: float) -> str:
    seconds = int(time.monotonic() - since)
    return f"{seconds // 60}:{seconds % 60:02d}"


def run_parts(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each part named by ``--parts``, in order: its results (or its error), times and load."""
    parts: dict[str, dict[str, Any]] = {}
    began = time.monotonic()
    for number, name in enumerate(args.parts, 1):
        settled = settle_machine(most_s=SETTLE_S)
        record: dict[str, Any] = {
            "argv": argv(name, args),
            "settled_s": round(settled, 1),
            "loadavg_before": loadavg(),
            "started_at": utc_now().isoformat(timespec="seconds"),
        }
        print(
            f"\n[targets {elapsed(began)}] part {number}/{len(args.parts)} {name}: started after "
            f"{settled:.1f} s for the machine to be quiet, load {record['loadavg_before']}",
            flush=True,
        )
        t0 = time.monotonic()
        try:
            record["results"] = RUNS[name](args)
        except Exception as error:  # noqa: BLE001 - recorded: the verdicts of this part say why
            traceback.print_exc()
            record["error"] = f"{type(error).__name__}: {error}"[:500]
        record["seconds"] = round(time.monotonic() - t0, 1)
        record["loadavg_after"] = loadavg()
        print(
            f"[targets {elapsed(began)}] part {name}: {'failed' if 'error' in record else 'done'} "
            f"in {record['seconds']:.0f} s, load {record['loadavg_after']}",
            flush=True,
        )
        parts[name] = record
    return parts


def ratio_text(verdict: Verdict) -> str:
    return "" if verdict.ratio is None else f"{verdict.ratio:.2f}{TIMES}"


def figure_text(verdict: Verdict) -> str:
    return "" if verdict.measured is None else verdict.measured.figure_text


def baseline_text(verdict: Verdict) -> str:
    return "" if verdict.measured is None else verdict.measured.baseline_text


def cell(text: str) -> str:
    return text.replace("|", "\\|")


QUICK_HELP = "a few minutes: every part at smaller sizes; its table is not a verdict"


def markdown(verdicts: list[Verdict], heading: str) -> str:
    """The verdict table as markdown, and under it "Why the misses": the top of docs/benchmarks.md."""
    lines = [
        heading,
        "",
        "| id | target (issue) | longhaul | same-run baseline | ratio | verdict |",
        "|---|---|---:|---:|---:|---|",
    ]
    for v in verdicts:
        words = f"**{v.outcome}**" + (f" {UNDECIDED}" if v.close else "")
        words += f": {'; '.join(v.problems)}" if v.problems else ""
        lines.append(
            f"| `{v.target.id}` | {cell(v.target.text)} ({v.target.issue}) | {cell(figure_text(v))} "
            f"| {cell(baseline_text(v))} | {ratio_text(v)} | {cell(words)} |"
        )
    told = [v for v in verdicts if v.reasons]
    if told:
        lines += ["", WHY_HEADING, ""]
        lines += [f"- `{v.target.id}` ({v.outcome}): {'; '.join(v.reasons)}." for v in told]
    return "\n".join(lines) + "\n"


WHY_HEADING = "**Why the misses** (and the targets within 30 %), from the run's own figures:"


def heading(args: argparse.Namespace, info: dict[str, Any], parts: dict[str, dict[str, Any]]) -> str:
    """Which run the table is of: command, commit, times, the load around each part."""
    loads = "; ".join(
        f"{name} {p['loadavg_before'][0]:g} → {p['loadavg_after'][0]:g}" for name, p in parts.items()
    )
    dirty = " with uncommitted changes" if info.get("git_tree_dirty") else ""
    quick = " **A quick run: smaller sizes than the targets name; not a verdict.**" if args.quick else ""
    command = "python -m bench.targets" + (" --quick" if args.quick else "")
    if list(args.parts) != list(PARTS):
        command += f" --parts {','.join(args.parts)}"
    speed = info.get("python_ms_per_million_additions")
    processor = (
        f"; the processor: a million Python additions in {speed:g} ms (the c=1 figures move with it)"
        if speed is not None
        else ""
    )
    return (
        f"`{command}` at `{info.get('git_commit', '?')}`{dirty}, {info.get('measured_at', '?')} "
        f"to {utc_now().isoformat(timespec='seconds')}; load average (1 min) before → after each part: "
        f"{loads}{processor}. Each ratio is to a baseline measured in the same run; a value within "
        f"30 % of its target is not decided by one run.{quick}"
    )


def arguments() -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "targets", quick_help=QUICK_HELP)
    parser.add_argument("--nats-url", default=os.environ.get("LONGHAUL_NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma list of parts to run, of {','.join(PARTS)} (a target whose part did not run: not run)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the verdict table as markdown here")
    parser.add_argument(
        "--decide",
        type=Path,
        metavar="RESULTS",
        help="run nothing: decide a saved run (its targets JSON) again with today's rules and reasons",
    )
    args = parser.parse_args()
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {unknown}; the parts are {','.join(PARTS)}")
    return args


def print_verdicts(verdicts: list[Verdict]) -> None:
    print(
        table(
            ["id", "issue", "longhaul", "same-run baseline", "ratio", "verdict"],
            [
                [v.target.id, v.target.issue, figure_text(v), baseline_text(v), ratio_text(v), v.text()]
                for v in verdicts
            ],
        )
    )


def decide_saved(args: argparse.Namespace) -> None:
    """``--decide RESULTS``: the verdicts of a saved run by the current ``bench.verdicts``."""
    saved = json.loads(args.decide.read_text())
    verdicts = decide_all(saved["parts"])
    print(f"verdicts of {args.decide} by today's rules:")
    print_verdicts(verdicts)
    if args.markdown is not None:
        args.markdown.write_text(markdown(verdicts, saved["heading"]))
        print(f"\nmarkdown table written to {args.markdown}")


def main() -> None:
    args = arguments()
    if args.decide is not None:
        decide_saved(args)
        return
    info = machine_info(args.database_url)
    began = time.monotonic()
    parts = run_parts(args)
    verdicts = decide_all(parts)
    print(f"\n[targets {elapsed(began)}] verdicts ({'quick sizes' if args.quick else 'full sizes'}):")
    print_verdicts(verdicts)
    title = heading(args, info, parts)
    if args.markdown is not None:
        args.markdown.write_text(markdown(verdicts, title))
        print(f"\nmarkdown table written to {args.markdown}")
    write_results(
        "targets",
        {
            "machine": info,
            "quick": args.quick,
            "parts_run": args.parts,
            "targets": [
                {"id": t.id, "issue": t.issue, "text": t.text, "rule": t.rule.describe()} for t in TARGETS
            ],
            "verdicts": [v.as_dict() for v in verdicts],
            "heading": title,
            "parts": parts,
            "seconds": round(time.monotonic() - began, 1),
            "loadavg_at_end": loadavg(),
        },
        args,
    )


if __name__ == "__main__":
    main()
