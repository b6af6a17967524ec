"""The ``cluster`` fixture: real ``longhaul`` processes on this test's schema, stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from longhaul.settings import Settings
from tests.crash.cluster import Cluster


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    """A ``Cluster`` for this test; every process it started is stopped at the end."""
    processes = Cluster(settings, tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()
