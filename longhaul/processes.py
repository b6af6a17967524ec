"""The long-running processes, one function each: open the parts (``wiring``), run until stopped.

Each stops on SIGINT/SIGTERM and closes what it opened. ``longhaul.supervisor`` runs them all in
one process (``up``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace

from longhaul import serving, wiring
from longhaul.demo import fake_iam as fake_iam_service
from longhaul.errors import CommandError
from longhaul.settings import Settings
from projections.projector import run_projector as follow_log
from projections.shared_log import SharedLog
from store.log import StoreConfig, TaskApplication
from workers.metrics import WorkerMetrics
from workers.skill_versions import ReleaseMismatchError
from workers.worker import Worker

log = logging.getLogger("longhaul")


async def gateway(settings: Settings) -> None:
    """Serve A2A over HTTP until stopped."""
    stop = serving.stop_event()
    store = wiring.open_store(settings, pool_size=wiring.STORE_POOL_SIZE)
    clock = wiring.system_clock(settings)
    try:
        sock = serving.listen(settings.host, settings.port)
        port = sock.getsockname()[1]
        async with wiring.gateway_app(settings, store, clock, port) as app:
            log.info("gateway on %s", wiring.public_url(settings, port))
            await serving.serve(app, sock, stop)
    finally:
        store.close()


async def worker(settings: Settings) -> None:
    """Claim and run tasks until stopped, then drain."""
    stop = serving.stop_event()
    store = wiring.open_store(settings, pool_size=wiring.STORE_POOL_SIZE)
    try:
        await run_worker(settings, store, stop)
    finally:
        store.close()


async def run_worker(
    settings: Settings,
    store: TaskApplication,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
    process: Worker | None = None,
) -> None:
    """Run a worker (``process``, else a new one) until ``stop``; a release that lacks a skill says so."""
    if process is None:
        process = wiring.build_worker(settings, store, metrics)
    try:
        await process.run(stop)
    except ReleaseMismatchError as error:
        raise CommandError(str(error)) from error


async def sweeper(settings: Settings) -> None:
    """End due pauses and expire old tasks until stopped."""
    stop = serving.stop_event()
    store = wiring.open_store(settings)
    try:
        await wiring.build_sweeper(settings, store).run(stop)
    finally:
        store.close()


async def relay(settings: Settings) -> None:
    """Publish committed events to NATS until stopped."""
    stop = serving.stop_event()
    wiring.needs_postgres(
        settings,
        "the relay",
        ", so a relay process has no events to publish (`longhaul up` runs without a relay then)",
    )
    names = wiring.nats_names(settings)
    store = wiring.open_store(settings)
    try:
        await wiring.build_relay(settings, store, names).run(stop)
    finally:
        store.close()


async def sequencer(settings: Settings) -> None:
    """Keep the Merkle tree over the log, sign checkpoints of it and publish them, until stopped."""
    stop = serving.stop_event()
    wiring.needs_postgres(
        settings,
        "the sequencer",
        ", with no log to keep a Merkle tree over (`longhaul up` runs without a sequencer then)",
    )
    names = wiring.nats_names(settings)
    signer = wiring.audit_signer(settings)
    store = wiring.open_store(settings)
    try:
        await wiring.build_sequencer(settings, store, names, signer).run(stop)
    finally:
        store.close()


async def dispatcher(settings: Settings) -> None:
    """Deliver push notifications (webhooks) for committed events until stopped."""
    stop = serving.stop_event()
    wiring.needs_postgres(
        settings,
        "the dispatcher",
        ", so a dispatcher process has no events to deliver (`longhaul up` runs without one then)",
    )
    names = wiring.nats_names(settings)
    signer = wiring.webhook_signer(settings)
    store = wiring.open_store(settings)
    try:
        await wiring.build_dispatcher(settings, store, names, signer).run(stop)
    finally:
        store.close()


async def projector(settings: Settings) -> None:
    """Keep the current-task view and the retention index following the log until stopped."""
    stop = serving.stop_event()
    wiring.needs_postgres(
        settings,
        "the projector",
        " and has no current-task view (ListTasks answers UnsupportedOperation there)",
    )
    store = wiring.open_store(settings)  # opened first, so a bad URL or a newer schema fails here, clearly
    config = store.config
    store.close()
    assert isinstance(config, StoreConfig)
    await run_projector(config, stop)


async def run_projector(
    config: StoreConfig, stop: asyncio.Event, shared_log: SharedLog | None = None
) -> None:
    """Run the projector (``projections.projector``) in a thread until ``stop``."""
    halt = threading.Event()
    small = replace(config, pool_size=wiring.PROJECTOR_POOL_SIZE, max_overflow=wiring.PROJECTOR_POOL_SIZE)
    thread = threading.Thread(
        target=follow_log,
        args=(small, halt),
        kwargs={"shared_log": shared_log},
        name="projector",
        daemon=True,
    )
    thread.start()
    try:
        await stop.wait()
    finally:
        halt.set()
        await asyncio.to_thread(thread.join)


async def fake_iam(host: str, port: int) -> None:
    """Serve the fake IAM until stopped."""
    stop = serving.stop_event()
    sock = serving.listen(host, port)
    log.info("fake IAM on http://%s:%d", host, sock.getsockname()[1])
    await serving.serve(fake_iam_service.create_app(), sock, stop)
