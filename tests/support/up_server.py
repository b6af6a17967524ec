"""``longhaul up`` for an end-to-end module: its own schema and stream, as a user starts it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from longhaul.settings import Settings
from tests.support.isolation import delete_stream, drop_schema
from tests.support.processes import LonghaulProcess, free_port, settings_env, wait_for_http

STARTUP_TIMEOUT_S = 45.0


@contextmanager
def up_server(
    database_url: str,
    nats_url: str,
    folder: Path,
    *,
    pythonpath: tuple[Path, ...] = (),
    **settings: Any,
) -> Iterator[str]:
    """Start ``longhaul up`` with ``settings`` on a fresh schema and stream; yield its base URL.

    The calling shell's ``LONGHAUL_*`` variables stay out. At the end ``up`` is stopped (it must
    exit 0) and its schema and stream are dropped. ``pythonpath``: folders of skill modules.
    """
    token = uuid.uuid4().hex[:12]
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("LONGHAUL_") and "TEST" not in n]:
            patch.delenv(name)
        made = Settings(
            database_url=database_url,
            database_schema=f"t_{token}",
            nats_url=nats_url,
            nats_stream=f"T_{token}",
            nats_subject_prefix=f"t{token}",
            data_dir=folder / "data",
            **settings,
        )
    port = free_port()
    env = settings_env(made, port=str(port))
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(folder) for folder in pythonpath)
    up = LonghaulProcess(["up"], env, folder / "up.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", STARTUP_TIMEOUT_S, up)
        yield base
    finally:
        code = up.stop()
        drop_schema(database_url, made.database_schema)
        delete_stream(nats_url, made.nats_stream)
        assert code == 0, up.log()
