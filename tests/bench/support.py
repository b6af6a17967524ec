"""Hand-made results of ``bench.a2a_compare`` for the tests of ``bench.verdicts`` and ``bench.reasons``."""

from __future__ import annotations

from typing import Any

from bench.verdicts import TARGETS, Target

SDK_MEMORY, SDK_POSTGRES = "sdk-memory", "sdk-postgres"


def target(target_id: str) -> Target:
    return next(t for t in TARGETS if t.id == target_id)


def row(per_s: float, p50: float = 10.0, p99: float = 50.0, **extra: Any) -> dict[str, Any]:
    """One server's summary, as ``bench.a2a_report.summarise`` makes it."""
    return {"per_s_median": per_s, "p50_ms": p50, "p99_ms": p99, "errors": 0, "refused": 0} | extra


def a2a(rows: dict[tuple[str, int, str], dict[str, Any]], nproc: int | None = None) -> dict[str, Any]:
    """``bench.a2a_compare.run``'s results holding ``rows`` by (mode, c, server), on ``nproc`` cores."""
    results: dict[str, dict[str, Any]] = {}
    for (mode, c, server), summary in rows.items():
        results.setdefault(f"{mode}@c={c}", {})[server] = summary
    return {"results": results} | ({} if nproc is None else {"machine": {"nproc": nproc}})


def parts(**by_part: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"results": results} for name, results in by_part.items()}
