"""``longhaul up``: the embedded services and every process in one process, stopped together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from contextlib import ExitStack

from longhaul import wiring
from longhaul.demo import fake_iam as fake_iam_service
from longhaul.local_services import SERVICES_FILE, with_embedded_services, write_services_file
from longhaul.processes import run_projector, run_worker
from longhaul.serving import listen, run_all, serve, stop_event
from longhaul.settings import Settings
from projections.shared_log import SharedLog
from store.evidence import SignerKey
from store.log import StoreConfig, TaskApplication
from workers.metrics import WorkerMetrics

log = logging.getLogger("longhaul")


def log_followers(
    settings: Settings,
    store: TaskApplication,
    stop: asyncio.Event,
    audit_key: SignerKey,
    port: int | None = None,
) -> list[Awaitable[None]]:
    """``up``'s parts that follow the log (relay, projector, sequencer) and the dispatcher.

    ``port`` is the gateway's, which the webhooks' file URLs name.

    The relay, the projector and the sequencer share one subscription to the log (ADR 0051).
    """
    assert isinstance(store.config, StoreConfig)
    names = wiring.nats_names(settings)
    shared_log = SharedLog(store.recorder)
    relay_part = wiring.build_relay(settings, store, names, shared_log)
    signer = wiring.webhook_signer(settings, create=True)
    return [
        relay_part.run(stop),
        run_projector(store.config, stop, shared_log),
        wiring.build_dispatcher(settings, store, names, signer, port).run(stop),
        wiring.build_sequencer(settings, store, names, audit_key, shared_log).run(stop),
    ]


async def up(settings: Settings) -> None:
    """Run everything in one process until Ctrl-C or SIGTERM, then stop it all, keeping the data.

    Starts embedded PostgreSQL and NATS when their URLs are unset, and a fake IAM when
    ``LONGHAUL_IAM_URL`` is unset; then the gateway, a worker, the sweeper, the relay, the
    projector, the webhook dispatcher (with a webhook secret it makes in the data directory
    when none is set, as it makes the checkpoint signing key) and the sequencer. The gateway
    hands a blocking send's new task straight to a free slot of the worker, its lease granted
    in the submission's commit (ADR 0032). With
    ``LONGHAUL_STORE=memory`` the tasks live in this process only: no PostgreSQL, NATS, relay,
    projector, dispatcher or sequencer (and ListTasks is unsupported).
    """
    stop = stop_event()
    in_memory = settings.store == "memory"
    audit_key = None if in_memory else wiring.audit_signer(settings, create=True)
    with ExitStack() as services:
        if in_memory:
            log.warning("LONGHAUL_STORE=memory: tasks are kept in this process only and lost when it stops")
        else:
            settings = with_embedded_services(settings, services)
        gateway_sock = listen(settings.host, settings.port)
        port = gateway_sock.getsockname()[1]
        parts: list[Awaitable[None]] = []
        dependencies: list[Awaitable[None]] = []
        dependencies_stop = asyncio.Event()
        if settings.iam_url is None:
            iam_sock = listen("127.0.0.1", 0)
            settings = settings.model_copy(
                update={"iam_url": f"http://127.0.0.1:{iam_sock.getsockname()[1]}"}
            )
            dependencies.append(serve(fake_iam_service.create_app(), iam_sock, dependencies_stop))
            log.info("fake IAM at %s", settings.iam_url)
        store = wiring.open_store(settings, pool_size=wiring.STORE_POOL_SIZE)
        try:
            metrics = WorkerMetrics()  # the worker's, served by this process's gateway at /metrics
            worker_part = wiring.build_worker(settings, store, metrics)  # the gateway hands it new tasks
            clock = wiring.system_clock(settings)
            async with wiring.gateway_app(settings, store, clock, port, metrics, hand_off=worker_part) as app:
                url = wiring.public_url(settings, port)
                parts += [
                    serve(app, gateway_sock, stop),
                    run_worker(settings, store, stop, process=worker_part),
                    wiring.build_sweeper(settings, store).run(stop),
                ]
                if not in_memory:
                    assert audit_key is not None
                    parts += log_followers(settings, store, stop, audit_key, port)
                write_services_file(settings, url)
                log.info(
                    "longhaul is up: %s/.well-known/agent-card.json (JSON-RPC at %s/a2a/jsonrpc)", url, url
                )
                if audit_key is not None:
                    log.info(
                        "audit signing key %s; its verifier key: %s", audit_key.name, audit_key.verifier()
                    )
                await run_all(parts, stop, dependencies=dependencies, dependencies_stop=dependencies_stop)
        finally:
            store.close()
            (settings.data_dir / SERVICES_FILE).unlink(missing_ok=True)
            if in_memory:
                log.info("longhaul stopped; the in-memory tasks are gone (LONGHAUL_STORE=memory)")
            else:
                log.info("longhaul stopped; data kept in %s", settings.data_dir)
