"""The ``cluster`` fixture: real ``longhaul`` processes on this test's schema, stopped afterwards; and
``nats_cluster``: three real ``nats-server`` nodes of this test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from longhaul.settings import Settings
from tests.crash.cluster import Cluster
from tests.support.nats_servers import NatsCluster


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    """A ``Cluster`` for this test; every process it started is stopped at the end."""
    processes = Cluster(settings, tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A started three-node JetStream cluster (``n1``..``n3``) of this test's own; stopped afterwards."""
    with NatsCluster(tmp_path / "nats", size=3) as nodes:
        yield nodes
