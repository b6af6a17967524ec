"""Run the A2A TCK 1.0 (a2aproject/a2a-tck, branch ``1.0-dev``) against a fresh ``longhaul up``.

Not a benchmark: pass/fail counts per requirement level, no timings. It lives here because it is
run by hand like the benchmarks, against the machine's PostgreSQL and NATS, and cleans up after
itself (a fresh schema, a fresh JetStream stream). The TCK is never part of the repository: it is
exported from a fetched git snapshot (``--tck-git-dir``) into ``--workdir`` and installed in a
virtual environment there (``uv venv`` + ``uv pip install -e``; the first run needs PyPI).

``--unique-message-ids`` also runs a copy of the TCK whose ``tck_id`` adds a fresh suffix per
call: the TCK reuses one ``messageId`` for different messages, which longhaul takes as resends
(docs/conformance.md). Those counts are informative only; the real run is the unpatched one.

    uv run python -m bench.tck --tck-git-dir /path/to/a2a-tck.git [--levels must should may]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.a2a_servers import servers
from bench.common import DEFAULT_DATABASE_URL, DEFAULT_NATS_URL, Options

SUMMARY = re.compile(r"^=*\s*(?P<counts>(\d+ \w+(, )?)+) in [\d.]+s")
TCK_ID_LINE = '    return f"tck-{name}-{_SESSION}"'
UNIQUE_TCK_ID_LINE = '    return f"tck-{name}-{_SESSION}-{uuid.uuid4().hex[:8]}"'
LEVELS = ("must", "should", "may")


@dataclass
class LevelResult:
    """One ``run_tck.py --level`` run: pytest's closing counts and the failed test ids."""

    level: str
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    log: str = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tck-git-dir", type=Path, required=True, help="a fetched a2a-tck git directory")
    parser.add_argument("--ref", default="1.0-dev", help="the TCK branch or commit (default 1.0-dev)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/longhaul-tck"))
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--nats-url", default=DEFAULT_NATS_URL)
    parser.add_argument("--transport", default="jsonrpc,http_json")
    parser.add_argument("--levels", nargs="+", choices=LEVELS, default=list(LEVELS))
    parser.add_argument("--unique-message-ids", action="store_true", help="also run the patched copy")
    args = parser.parse_args()

    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    tck = export_tck(args.tck_git_dir, args.ref, workdir / "tck")
    python = tck_venv(workdir / "venv", tck)
    commit = git(args.tck_git_dir, "rev-parse", args.ref).decode().strip()
    copies = [("as published", tck)]
    if args.unique_message_ids:
        copies.append(("unique messageIds", patched_copy(tck, workdir / "tck-unique")))

    options = Options(args.database_url, args.nats_url, quick=False)
    # ``longhaul up`` (its log: longhaul.log) with the TCK's conformance skill, loopback webhooks
    settings = {"default_skill": "conformance", "allow_private_webhooks": "true"}
    with servers(["longhaul"], options, workdir, **settings) as urls:
        base = urls["longhaul"][0]
        results = {
            name: [run_level(python, copy, base, args.transport, level, workdir) for level in args.levels]
            for name, copy in copies
        }

    print(f"\nA2A TCK {args.ref} at {commit[:7]}, --transport {args.transport}, against longhaul up")
    for name, levels in results.items():
        print(f"\n{name}:")
        for result in levels:
            counts = ", ".join(f"{n} {what}" for what, n in result.counts.items())
            print(f"  --level {result.level:<6} {counts}   (log: {result.log})")
            for test in result.failed:
                print(f"      FAILED {test}")
    summary: dict[str, Any] = {
        "tck_ref": args.ref,
        "tck_commit": commit,
        "transport": args.transport,
        "runs": {name: [r.__dict__ for r in levels] for name, levels in results.items()},
    }
    (workdir / "tck-results.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nsummary written to {workdir / 'tck-results.json'}")


def git(git_dir: Path, *args: str) -> bytes:
    """What ``git --git-dir GIT_DIR ARGS...`` writes on stdout."""
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True).stdout


def export_tck(git_dir: Path, ref: str, target: Path) -> Path:
    """A fresh export of ``ref`` in ``target`` (``git archive``: no history, nothing to commit)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=git(git_dir, "archive", ref), check=True)
    return target


def tck_venv(venv: Path, tck: Path) -> Path:
    """A virtual environment with the TCK's dependencies, on this interpreter (no download)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["uv", "venv", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(["uv", "pip", "install", "--python", str(python), "-q", "-e", str(tck)], check=True)
    return python


def patched_copy(tck: Path, target: Path) -> Path:
    """A copy of the TCK whose ``tck_id`` gives a fresh id per call (informative runs only)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(tck, target)
    base = target / "tck" / "requirements" / "base.py"
    text = base.read_text()
    if TCK_ID_LINE not in text:
        raise SystemExit(f"{base}: tck_id changed; cannot make messageIds unique")
    base.write_text(text.replace(TCK_ID_LINE, UNIQUE_TCK_ID_LINE))
    return target


def run_level(python: Path, tck: Path, base: str, transport: str, level: str, workdir: Path) -> LevelResult:
    """``./run_tck.py --level LEVEL``; pytest's closing line and the FAILED lines are kept."""
    log = workdir / f"tck-{tck.name}-{level}.log"
    command = [str(python), "run_tck.py", "--sut-host", base, "--transport", transport, "--level", level]
    command += ["--", "-p", "no:cacheprovider", "-rA"]
    env = {**os.environ, "PYTHONPATH": str(tck)}  # this copy's ``tck`` package, not the installed one
    # A failing TCK run is an answer, not an error: its counts are what this reports.
    done = subprocess.run(
        command, check=False, cwd=tck, env=env, capture_output=True, text=True, timeout=1800
    )
    output = done.stdout + done.stderr
    log.write_text(output)
    report = tck / "reports" / "compatibility.json"  # per requirement; the next level overwrites it
    if report.exists():
        shutil.copy(report, log.with_suffix(".compatibility.json"))
    result = LevelResult(level=level, log=str(log))
    for line in output.splitlines():
        match = SUMMARY.match(line)
        if match:
            for part in match["counts"].split(", "):
                number, what = part.split(" ", 1)
                result.counts[what] = int(number)
        elif line.startswith("FAILED tests/"):
            result.failed.append(line.removeprefix("FAILED ").split(" - ")[0])
    return result


if __name__ == "__main__":
    main()
