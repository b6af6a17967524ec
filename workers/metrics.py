"""A worker's own Prometheus metrics: claims, step durations and failed attempts, in this process only.

They live in a ``CollectorRegistry`` of the process (not the library's global one). The gateway's
``/metrics`` includes them when the worker runs in its process (``longhaul up``); a standalone
``longhaul worker`` keeps them, but serves no HTTP, so nothing scrapes them there.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

STEP_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
"""Steps run from milliseconds (echo) to many minutes (a report): seconds, on a wide scale."""


class WorkerMetrics:
    """The counters a worker updates as it claims tasks and runs their steps."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.claims = Counter(
            "longhaul_worker_claims",
            "Tasks this process's worker claimed (LeaseGranted appended), by skill.",
            ["skill"],
            registry=self.registry,
        )
        self.steps = Histogram(
            "longhaul_worker_step_seconds",
            "Time a step ran, until its outcome or error (its commit excluded), by skill and outcome.",
            ["skill", "outcome"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.failed_attempts = Counter(
            "longhaul_worker_step_attempts_failed",
            "Failed attempts at a step this process recorded, by skill and cause (error, timeout,"
            " lease_lost: counted by the worker whose claim found the lost lease).",
            ["skill", "cause"],
            registry=self.registry,
        )
        self.failed_tasks = Counter(
            "longhaul_worker_tasks_failed_by_policy",
            "Tasks this process failed because a step used up its retry policy, by skill.",
            ["skill"],
            registry=self.registry,
        )

    def claimed(self, skill: str) -> None:
        """One claim of a task of ``skill``."""
        self.claims.labels(skill=skill).inc()

    def step_ran(self, skill: str, outcome: str, seconds: float) -> None:
        """A step of ``skill`` ran ``seconds`` and ended in ``outcome`` (an outcome type, or ``error``)."""
        self.steps.labels(skill=skill, outcome=outcome).observe(seconds)

    def attempt_failed(self, skill: str, cause: str) -> None:
        """An attempt at a step of ``skill`` failed with ``cause``."""
        self.failed_attempts.labels(skill=skill, cause=cause).inc()

    def failed_by_policy(self, skill: str) -> None:
        """A task of ``skill`` failed: a step's attempts were spent."""
        self.failed_tasks.labels(skill=skill).inc()
