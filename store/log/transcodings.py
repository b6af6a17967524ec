"""How the domain's value objects are stored in event and snapshot state (JSON).

Events hold only JSON types and datetimes; the Task's snapshot state also holds a ``Pause``.
Every ``Application`` that stores tasks registers these (``TaskApplication.register_transcodings``).
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding
from typing_extensions import override

from domain.task import Pause


class PauseAsDict(Transcoding):
    """A ``Pause`` as ``{"deadline": ..., "on_deadline": ...}`` (the deadline by the datetime transcoding)."""

    type = Pause
    name = "pause"

    @override
    def encode(self, obj: Pause) -> dict[str, Any]:
        return {"deadline": obj.deadline, "on_deadline": obj.on_deadline}

    @override
    def decode(self, data: dict[str, Any]) -> Pause:
        return Pause(deadline=data["deadline"], on_deadline=data["on_deadline"])


def register_domain_transcodings(transcoder: JSONTranscoder) -> None:
    """Register the transcodings of the domain's value objects on ``transcoder``."""
    transcoder.register(PauseAsDict())
