"""How long a terminal task is kept before it expires: a default, overridden per tenant and skill.

An override's key names a tenant (``tenant:acme``), a skill (``skill:research``) or both
(``tenant:acme,skill:research``). The most specific key wins: tenant and skill, then skill, then
tenant, then the default.

The sweeper asks the retention index (``projections.retention_index``; the run queue of a memory
store) for tasks ended before ``now - shortest`` (one index range) and checks each candidate's
own retention (``of``) before expiring it; see ``workers.sweeper``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

KINDS = ("tenant", "skill")


def parse_key(key: str) -> tuple[str | None, str | None]:
    """``(tenant, skill)`` of an override key; either may be ``None``, not both.

    Raises:
        ValueError: Not ``tenant:T``, ``skill:S`` or ``tenant:T,skill:S``.
    """
    found: dict[str, str] = {}
    for part in key.split(","):
        kind, sep, value = part.strip().partition(":")
        if not sep or kind not in KINDS or not value or kind in found:
            raise ValueError(
                f"bad retention override key {key!r}: use tenant:NAME, skill:NAME or tenant:NAME,skill:NAME"
            )
        found[kind] = value
    return found.get("tenant"), found.get("skill")


@dataclass(frozen=True)
class RetentionPolicy:
    """The retention of every task: ``default``, unless an override for its tenant or skill applies."""

    default: timedelta
    overrides: Mapping[tuple[str | None, str | None], timedelta] = field(default_factory=dict)
    """``(tenant, skill) -> retention``; ``None`` stands for any."""

    @classmethod
    def of_settings(cls, default: timedelta, overrides: Mapping[str, timedelta]) -> RetentionPolicy:
        """The policy of ``LONGHAUL_RETENTION`` and ``LONGHAUL_RETENTION_OVERRIDES``.

        Raises:
            ValueError: A key is malformed, or a retention is not positive.
        """
        parsed: dict[tuple[str | None, str | None], timedelta] = {}
        for key, retention in overrides.items():
            if retention <= timedelta(0):
                raise ValueError(f"retention override {key!r} must be positive")
            parsed[parse_key(key)] = retention
        if default <= timedelta(0):
            raise ValueError("the retention must be positive")
        return cls(default=default, overrides=parsed)

    def of(self, tenant: str, skill: str) -> timedelta:
        """The retention of a task of ``tenant`` running ``skill``: the most specific override."""
        for key in ((tenant, skill), (None, skill), (tenant, None)):
            if key in self.overrides:
                return self.overrides[key]
        return self.default

    @property
    def shortest(self) -> timedelta:
        """The shortest retention of any task: the sweeper's search bound."""
        return min((self.default, *self.overrides.values()))

    def __str__(self) -> str:
        if not self.overrides:
            return span(self.default)
        return f"{span(self.default)}, {len(self.overrides)} override(s), shortest {span(self.shortest)}"


_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60))


def span(duration: timedelta) -> str:
    """A duration as people write it: ``30 days``, ``1 day 6 hours``, ``90 seconds``, ``0.6 seconds``.

    Whole seconds and larger units are counted exactly; a fraction of a second (a test's step
    timeout, say) stays with the seconds, to the millisecond.
    """
    whole, fraction = divmod(round(duration.total_seconds() * 1000), 1000)
    parts = []
    for unit, size in _UNITS:
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    if whole or fraction or not parts:
        seconds = whole + fraction / 1000
        parts.append(f"{seconds:g} second{'s' if seconds != 1 else ''}")
    return " ".join(parts)
