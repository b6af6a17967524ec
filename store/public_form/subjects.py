"""NATS names of one deployment: the JetStream streams and the subjects task events and checkpoints go to.

Shared by the relay (which publishes events), the sequencer (which publishes signed checkpoints)
and the gateway (which listens to wake blocking calls). The subject layout is part of the public
schema in ``docs/events.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID


def server_urls(url: str) -> list[str]:
    """The server URLs of a ``LONGHAUL_NATS_URL``: one URL, or several separated by commas.

    nats-py takes a list (one string is one server); a client connects to any of them and
    learns the rest of a cluster from the server it reached.
    """
    return [part.strip() for part in url.split(",") if part.strip()]


def subject_token(value: str) -> str:
    """``value`` made safe as one NATS subject token."""
    cleaned = "".join(c if c.isalnum() or c in "-_" else "_" for c in value)
    return cleaned or "_"


@dataclass(frozen=True)
class NatsNames:
    """Where a deployment's events go: one stream, subjects under one prefix."""

    url: str
    stream: str
    subject_prefix: str

    @property
    def urls(self) -> list[str]:
        """The server URLs to connect to (``url`` split at commas: the nodes of a cluster)."""
        return server_urls(self.url)

    @property
    def all_subjects(self) -> str:
        """The stream's subject filter."""
        return f"{self.subject_prefix}.tasks.>"

    def subject(self, tenant: str, task_id: UUID, event_type: str) -> str:
        """``<prefix>.tasks.<tenant>.<task id>.<EventType>``."""
        return f"{self.subject_prefix}.tasks.{subject_token(tenant)}.{task_id}.{event_type}"

    @property
    def checkpoint_subject(self) -> str:
        """``<prefix>.checkpoints``: the sequencer's signed checkpoints, one message each."""
        return f"{self.subject_prefix}.checkpoints"

    @property
    def checkpoint_stream(self) -> str:
        """``<stream>_CHECKPOINTS``: the stream of its own that keeps the checkpoints (ADR 0029)."""
        return f"{self.stream}_CHECKPOINTS"

    def task_subjects(self, task_id: UUID) -> str:
        """A wildcard subject matching every event of one task."""
        return f"{self.subject_prefix}.tasks.*.{task_id}.*"
