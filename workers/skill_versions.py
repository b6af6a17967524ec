"""Versioned code: a release refuses to run while live tasks need a skill version it lacks."""

from __future__ import annotations

from dataclasses import dataclass

from domain.skill import SkillRegistry
from store.log import TaskApplication


class ReleaseMismatchError(RuntimeError):
    """Live tasks are pinned to skill versions this release does not have."""


@dataclass(frozen=True)
class VersionUse:
    """How many live (non-terminal) tasks run one skill version, and whether it is registered."""

    skill: str
    version: int
    live_tasks: int
    registered: bool


def version_use(store: TaskApplication, registry: SkillRegistry) -> list[VersionUse]:
    """Every registered skill version and every version live tasks use, with live counts."""
    live = {(s, v): n for s, v, n in store.run_queue.live_versions()}
    keys = set(live) | {(s.name, s.version) for s in registry.all()}
    return [
        VersionUse(skill=s, version=v, live_tasks=live.get((s, v), 0), registered=registry.has(s, v))
        for s, v in sorted(keys)
    ]


def check_release(store: TaskApplication, registry: SkillRegistry) -> None:
    """Raise ``ReleaseMismatchError`` naming the tasks and versions this release cannot run."""
    missing = [u for u in version_use(store, registry) if u.live_tasks and not u.registered]
    if not missing:
        return
    lines = []
    for use in missing:
        tasks = store.run_queue.live_tasks_of(use.skill, use.version, limit=10)
        shown = ", ".join(str(t) for t in tasks)
        more = f" and {use.live_tasks - len(tasks)} more" if use.live_tasks > len(tasks) else ""
        lines.append(f"  {use.skill} v{use.version}: {use.live_tasks} live task(s): {shown}{more}")
    raise ReleaseMismatchError(
        "this release cannot run live tasks pinned to skill versions it does not have:\n"
        + "\n".join(lines)
        + "\nKeep those versions registered until their tasks drain (see `longhaul skills`)."
    )
