"""The services a machine runs without URLs: embedded PostgreSQL and NATS, and a running ``up``'s.

``longhaul up`` starts the embedded services and names them in ``<data dir>/services.json``;
a one-shot command run beside it reads that file and uses the same store.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from longhaul import wiring
from longhaul.embedded import DataInUseError, EmbeddedError, EmbeddedNats, EmbeddedPostgres
from longhaul.errors import CommandError
from longhaul.settings import Settings
from store.log import TaskApplication

log = logging.getLogger("longhaul")

SERVICES_FILE = "services.json"


def with_embedded_services(settings: Settings, services: ExitStack, *, nats: bool = True) -> Settings:
    """``settings`` with an embedded PostgreSQL (and NATS) for each URL not set, stopped by ``services``."""
    update: dict[str, Any] = {}
    if settings.database_url is None:
        postgres = EmbeddedPostgres(settings.data_dir)
        update["database_url"] = _start_embedded(postgres, "PostgreSQL")
        services.callback(postgres.stop)
        log.info("embedded PostgreSQL at %s (data in %s)", update["database_url"], settings.data_dir)
    if nats and settings.nats_url is None:
        server = EmbeddedNats(settings.data_dir)
        update["nats_url"] = _start_embedded(server, "NATS")
        services.callback(server.stop)
        log.info("embedded NATS at %s", update["nats_url"])
    return settings.model_copy(update=update) if update else settings


def _start_embedded(service: EmbeddedPostgres | EmbeddedNats, name: str) -> str:
    try:
        return service.start()
    except DataInUseError as error:
        raise CommandError(
            f"the embedded {name}'s data in {service.base} is in use by another process "
            "(another `longhaul up` with this LONGHAUL_DATA_DIR?); stop it, or set another LONGHAUL_DATA_DIR"
        ) from error
    except EmbeddedError as error:
        raise CommandError(f"the embedded {name} did not start: {error}") from error


def write_services_file(settings: Settings, url: str) -> None:
    """Name this ``up``'s services (the store's and NATS's URLs, the gateway's) in the data directory."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    info = {"database_url": settings.database_url, "nats_url": settings.nats_url, "gateway_url": url}
    (settings.data_dir / SERVICES_FILE).write_text(json.dumps(info, indent=2))


def running_up(data_dir: Path, service: str = "database_url") -> str | None:
    """The URL of a running ``up``'s ``service`` with its data in ``data_dir``; None if none runs."""
    path = data_dir / SERVICES_FILE
    if not path.exists():
        return None
    url = json.loads(path.read_text()).get(service)
    return url if isinstance(url, str) else None


@contextlib.contextmanager
def store_for_reading(settings: Settings, command: str) -> Iterator[TaskApplication]:
    """The store: at the configured URL, else at a running ``up``'s, else an embedded one."""
    wiring.needs_postgres(
        settings,
        f"`longhaul {command}`",
        ", the one that runs it, so there is nothing here to read or migrate",
    )
    with ExitStack() as services:
        if settings.database_url is None:
            running = running_up(settings.data_dir)
            if running is not None:
                settings = settings.model_copy(update={"database_url": running})
            else:
                settings = with_embedded_services(settings, services, nats=False)
        store = wiring.open_store(settings)
        try:
            yield store
        finally:
            store.close()
