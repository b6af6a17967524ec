"""A task's state as an auditor reads it at a version: the wire ``Task`` and longhaul's own fields.

``task_state_json`` is what ``longhaul history --at-version N`` prints and
``GET /audit/v1/tasks/{id}/state?version=N`` answers: ``task``, the A2A ``Task`` the gateway would
have answered after that version (``store.public_form.task_wire.task_to_wire``, the one builder of it),
and ``longhaul``, the state A2A does not show (lease, step, checkpoint, pause, effects, push config
ids; never a push config's secrets).
"""

from __future__ import annotations

from typing import Any

from domain.task import Task
from store.public_form.event_bodies import json_ready
from store.public_form.task_wire import task_to_wire

JSON = dict[str, Any]


def task_state_json(task: Task) -> JSON:
    """``{"version", "task", "longhaul"}`` of ``task`` as it is (one loaded at a version, say)."""
    lease = (
        {"worker": task.lease_owner, "epoch": task.lease_epoch, "until": task.lease_until}
        if task.lease_owner is not None
        else None
    )
    pause = {"deadline": task.pause.deadline, "onDeadline": task.pause.on_deadline} if task.pause else None
    own = {
        "tenant": task.tenant,
        "state": str(task.state),
        "skill": task.skill,
        "skillVersion": task.skill_version,
        "nextStep": task.next_step,
        "checkpoint": task.checkpoint,
        "leaseEpoch": task.lease_epoch,
        "lease": lease,
        "pause": pause,
        "effects": task.effects,
        "pushConfigIds": sorted(task.push_configs),
        "expired": task.expired,
        "modified": task.modified_on,
    }
    return {"version": task.version, "task": task_to_wire(task), "longhaul": json_ready(own)}
