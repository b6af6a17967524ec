"""What each ``longhaul`` subcommand does. Every long-running command stops on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import nats
import psycopg
import uvicorn
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import OperationalError as StoreOperationalError

from api.api_keys import ApiKeyError, mint_key
from api.app import create_app
from api.config import GatewayConfig
from api.service import DEFAULT_TENANT
from api.task_feed import StoreLog, TaskFeed
from api.waiting import FeedWaiter
from domain.clock import Clock
from domain.task import Task
from longhaul import tail as tail_consumer
from longhaul import wiring
from longhaul.demo import fake_iam as fake_iam_service
from longhaul.embedded import DataInUseError, EmbeddedError, EmbeddedNats, EmbeddedPostgres
from longhaul.settings import Settings
from projections.projector import lags, rebuild_all, run_projector
from projections.shared_log import SharedLog
from store.deliveries import Attempt, Delivery, task_deliveries
from store.evidence import (
    ArchiveError,
    ChainFault,
    ChainReport,
    ChainRow,
    LogAuditReads,
    LogReport,
    MerkleLog,
    Receipt,
    SignerKey,
    VerifierKey,
    archive_expired,
    archive_histories,
    audit_events,
    audit_store,
    effects_document,
    effects_of,
    events_document,
    read_archive,
    receipt_faults,
    replay,
    verify_chains,
)
from store.log import (
    MemoryConfig,
    NoSuchVersionError,
    PostgresRunQueueRecorder,
    SchemaTooNewError,
    StoreConfig,
    TaskApplication,
    TaskNotFoundError,
)
from store.public_form import dumps, iso, task_state_json
from workers.dispatcher import Dispatcher, DispatcherUnavailableError
from workers.metrics import WorkerMetrics
from workers.relay import Relay, RelayUnavailableError, StreamLimits
from workers.sequencer import Sequencer, SequencerUnavailableError
from workers.skill_versions import ReleaseMismatchError, version_use
from workers.sweeper import Sweeper
from workers.webhook_signing import WebhookSigner
from workers.worker import Worker

log = logging.getLogger("longhaul")

SERVICES_FILE = "services.json"
STORE_POOL_SIZE = 8
"""Connections a process keeps open (plus as many again on demand). Store calls run in asyncio's
default thread pool (a few threads), so more connections would only sit idle."""
PROJECTOR_POOL_SIZE = 2
"""Connections the projector's store keeps (plus as many again on demand): its subscription's
LISTEN (in ``up``, the shared subscription's, on the store's pool), its reads of the log and the
views' shared transactions (``projections.projector``)."""
HTTP_SHUTDOWN_GRACE_S = 5
"""On stop, open HTTP requests (a blocking SendMessage, say) get this long before they are cut."""
HTTP_KEEPALIVE_S = 75
"""How long an idle keep-alive connection stays open: longer than clients keep theirs (httpx 5 s,
aiohttp 15 s), so that a client never sends on a connection the gateway is closing at the same
moment (uvicorn's default, 5 s, races httpx's 5 s: a reset request at 128 clients, ADR 0035)."""


class CommandError(Exception):
    """A command could not run; the message says why and what to do."""


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to us (we stop it with ``should_exit``)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _listen(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so the app can name its real port (``port`` 0: any).

    The protocol is named (``IPPROTO_TCP``): asyncio sets ``TCP_NODELAY`` on accepted connections
    only when the listening socket says it is TCP, and without it every request on a keep-alive
    connection waits about 40 ms for the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return sock


async def _serve(app: Any, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve ``app`` on ``sock`` until ``stop``; in-flight requests get a short grace period."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        log_config=None,  # uvicorn's records go to the root logger: one format (longhaul/logs.py)
        access_log=False,
        http="httptools",  # a C parser, not h11's pure Python one: less CPU per request (ADR 0045)
        proxy_headers=False,  # nothing reads the client's address or scheme: no X-Forwarded-* pass
        timeout_graceful_shutdown=HTTP_SHUTDOWN_GRACE_S,
        timeout_keep_alive=HTTP_KEEPALIVE_S,
    )
    server = _QuietServer(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    server.should_exit = True
    await serving
    sock.close()


@contextlib.asynccontextmanager
async def _gateway_app(
    settings: Settings,
    store: TaskApplication,
    clock: Clock,
    port: int,
    worker_metrics: WorkerMetrics | None = None,
    hand_off: Worker | None = None,
) -> AsyncIterator[Any]:
    """The Litestar app, waking blocking calls from NATS (or polling the log without NATS).

    Over an in-memory store no relay publishes to NATS, so blocking calls poll the log.
    ``hand_off`` is the worker of this process (``up``), which takes blocking sends' new tasks.
    """
    registry = wiring.build_registry(settings)
    api_keys = wiring.key_ring(settings)
    if api_keys is None:
        log.warning(
            "NO API KEYS (LONGHAUL_API_KEYS, LONGHAUL_API_KEY_FILE): the gateway is OPEN, every caller is"
            " served without authentication as whatever tenant it names (default %r); development only",
            DEFAULT_TENANT,
        )
    else:
        tenants = sorted(api_keys.tenants)
        log.info("API keys: %d, for the tenants %s", len(api_keys.keys), ", ".join(tenants))
    feed = None
    waiter = None
    if settings.nats_url is not None and settings.store == "postgres":
        try:
            feed = await TaskFeed.connect(wiring.nats_names(settings), StoreLog(store))
            waiter = FeedWaiter(feed)
        except Exception as error:  # noqa: BLE001 - serve anyway; blocking calls poll the log
            log.warning(
                "NATS at %s unreachable (%r): blocking calls will poll the log", settings.nats_url, error
            )
    try:
        yield create_app(
            GatewayConfig(
                store=store,
                registry=registry,
                clock=clock,
                default_skill=settings.default_skill,
                max_pause=settings.max_pause,
                retention=settings.retention,
                retention_overridden=bool(settings.retention_overrides),
                public_url=wiring.public_url(settings, port),
                waiter=waiter,
                relay_stream=settings.nats_stream if settings.store == "postgres" else None,
                process_metrics=worker_metrics.registry if worker_metrics is not None else None,
                allow_private_webhooks=settings.allow_private_webhooks,
                api_keys=api_keys,
                max_in_flight=settings.max_in_flight,
                overload_target_s=settings.overload_target_seconds,
                max_body_bytes=settings.max_body_bytes,
                rest_media_type=settings.rest_media_type,
                feed=feed,
                stream_keepalive_s=settings.stream_keepalive_seconds,
                stream_max_pending=settings.stream_max_pending,
                audit_verifier_keys=wiring.audit_verifier_keys(settings),
                hand_off=hand_off,
            )
        )
    finally:
        if feed is not None:
            await feed.close()


def _open_store(settings: Settings, *, pool_size: int = 5) -> TaskApplication:
    try:
        return wiring.build_store(settings, pool_size=pool_size)
    except (wiring.ConfigurationError, SchemaTooNewError) as error:
        raise CommandError(str(error)) from error
    except (psycopg.OperationalError, StoreOperationalError) as error:
        url = _without_password(settings.database_url or "")
        raise CommandError(
            f"cannot use PostgreSQL at {url}: {_first_line(error)} (check LONGHAUL_DATABASE_URL)"
        ) from error


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def _first_line(error: Exception) -> str:
    """The gist of a driver error: its first line, without psycopg's "connection failed: " prefix."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return lines[0].removeprefix("connection failed: ")


async def _run_all(
    parts: list[Awaitable[None]],
    stop: asyncio.Event,
    *,
    dependencies: Sequence[Awaitable[None]] = (),
    dependencies_stop: asyncio.Event | None = None,
) -> None:
    """Run ``parts`` until ``stop``; if one fails, stop the others and re-raise.

    ``dependencies`` are services the parts call (the fake IAM a step talks to). They run until
    every part has finished, draining workers included, and only then are stopped through
    ``dependencies_stop``: a step that commits during the drain still reaches them.
    """
    services = [asyncio.ensure_future(d) for d in dependencies]
    tasks = [asyncio.ensure_future(p) for p in parts]
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([*tasks, *services, stopper], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    if dependencies_stop is not None:
        dependencies_stop.set()
    results += await asyncio.gather(*services, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


# ---------------------------------------------------------------------- the processes


async def gateway(settings: Settings) -> None:
    """Serve A2A over HTTP until stopped."""
    stop = _stop_event()
    store = _open_store(settings, pool_size=STORE_POOL_SIZE)
    clock = wiring.system_clock(settings)
    try:
        sock = _listen(settings.host, settings.port)
        port = sock.getsockname()[1]
        async with _gateway_app(settings, store, clock, port) as app:
            log.info("gateway on %s", wiring.public_url(settings, port))
            await _serve(app, sock, stop)
    finally:
        store.close()


async def worker(settings: Settings) -> None:
    """Claim and run tasks until stopped, then drain."""
    stop = _stop_event()
    store = _open_store(settings, pool_size=STORE_POOL_SIZE)
    try:
        await _worker(settings, store, stop)
    finally:
        store.close()


def _build_worker(settings: Settings, store: TaskApplication, metrics: WorkerMetrics | None = None) -> Worker:
    return Worker(
        metrics=metrics,
        store=store,
        registry=wiring.build_registry(settings),
        clock=wiring.system_clock(settings),
        config=wiring.worker_config(settings),
        policy=wiring.run_policy(settings),
    )


async def _worker(
    settings: Settings,
    store: TaskApplication,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
    process: Worker | None = None,
) -> None:
    if process is None:
        process = _build_worker(settings, store, metrics)
    try:
        await process.run(stop)
    except ReleaseMismatchError as error:
        raise CommandError(str(error)) from error


async def sweeper(settings: Settings) -> None:
    """End due pauses and expire old tasks until stopped."""
    stop = _stop_event()
    store = _open_store(settings)
    try:
        await _sweeper(settings, store).run(stop)
    finally:
        store.close()


def _sweeper(settings: Settings, store: TaskApplication) -> Sweeper:
    return Sweeper(
        store=store,
        clock=wiring.system_clock(settings),
        retention=wiring.retention_policy(settings),
        interval=settings.sweep_interval_seconds,
    )


async def relay(settings: Settings) -> None:
    """Publish committed events to NATS until stopped."""
    stop = _stop_event()
    _needs_postgres(
        settings,
        "the relay",
        ", so a relay process has no events to publish (`longhaul up` runs without a relay then)",
    )
    names = _names(settings)
    store = _open_store(settings)
    try:
        await _relay(store, names, wiring.stream_limits(settings)).run(stop)
    finally:
        store.close()


def _relay(store: TaskApplication, names: Any, limits: StreamLimits) -> Relay:
    try:
        return Relay(store=store, names=names, limits=limits)
    except RelayUnavailableError as error:
        raise CommandError(str(error)) from error


async def sequencer(settings: Settings) -> None:
    """Keep the Merkle tree over the log, sign checkpoints of it and publish them, until stopped."""
    stop = _stop_event()
    _needs_postgres(
        settings,
        "the sequencer",
        ", with no log to keep a Merkle tree over (`longhaul up` runs without a sequencer then)",
    )
    names = _names(settings)
    try:
        signer = wiring.audit_signer(settings)
    except wiring.ConfigurationError as error:
        raise CommandError(str(error)) from error
    store = _open_store(settings)
    try:
        await _sequencer(settings, store, names, signer).run(stop)
    finally:
        store.close()


def _sequencer(
    settings: Settings,
    store: TaskApplication,
    names: Any,
    signer: SignerKey,
    shared_log: SharedLog | None = None,
) -> Sequencer:
    try:
        return Sequencer(
            store=store,
            names=names,
            signer=signer,
            clock=wiring.system_clock(settings),
            interval=settings.checkpoint_interval_seconds,
            gather=settings.sequencer_gather_seconds,
            limits=wiring.stream_limits(settings),
            shared_log=shared_log,
        )
    except SequencerUnavailableError as error:
        raise CommandError(str(error)) from error


async def dispatcher(settings: Settings) -> None:
    """Deliver push notifications (webhooks) for committed events until stopped."""
    stop = _stop_event()
    _needs_postgres(
        settings,
        "the dispatcher",
        ", so a dispatcher process has no events to deliver (`longhaul up` runs without one then)",
    )
    names = _names(settings)
    try:
        signer = wiring.webhook_signer(settings)
    except wiring.ConfigurationError as error:
        raise CommandError(str(error)) from error
    store = _open_store(settings)
    try:
        await _dispatcher(settings, store, names, signer).run(stop)
    finally:
        store.close()


def _dispatcher(settings: Settings, store: TaskApplication, names: Any, signer: WebhookSigner) -> Dispatcher:
    try:
        return Dispatcher(
            store=store,
            names=names,
            signer=signer,
            config=wiring.dispatch_config(settings),
            clock=wiring.system_clock(settings),
            limits=wiring.stream_limits(settings),
        )
    except DispatcherUnavailableError as error:
        raise CommandError(str(error)) from error


def _names(settings: Settings) -> Any:
    try:
        return wiring.nats_names(settings)
    except wiring.ConfigurationError as error:
        raise CommandError(str(error)) from error


async def projector(settings: Settings) -> None:
    """Keep the current-task view and the retention index following the log until stopped."""
    stop = _stop_event()
    _needs_postgres(
        settings,
        "the projector",
        " and has no current-task view (ListTasks answers UnsupportedOperation there)",
    )
    store = _open_store(settings)  # opened first, so a bad URL or a newer schema fails here, clearly
    config = store.config
    store.close()
    assert isinstance(config, StoreConfig)
    await _projector(config, stop)


async def _projector(config: StoreConfig, stop: asyncio.Event, shared_log: SharedLog | None = None) -> None:
    """Run the projector (``projections.projector``) in a thread until ``stop``."""
    halt = threading.Event()
    small = replace(config, pool_size=PROJECTOR_POOL_SIZE, max_overflow=PROJECTOR_POOL_SIZE)
    thread = threading.Thread(
        target=run_projector,
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
    stop = _stop_event()
    sock = _listen(host, port)
    log.info("fake IAM on http://%s:%d", host, sock.getsockname()[1])
    await _serve(fake_iam_service.create_app(), sock, stop)


def _log_followers(
    settings: Settings, store: TaskApplication, stop: asyncio.Event, audit_key: SignerKey
) -> list[Awaitable[None]]:
    """``up``'s parts that follow the log (relay, projector, sequencer) and the dispatcher.

    The relay, the projector and the sequencer share one subscription to the log (ADR 0051).
    """
    assert isinstance(store.config, StoreConfig)
    names = wiring.nats_names(settings)
    shared_log = SharedLog(store.recorder)
    relay_part = Relay(store=store, names=names, limits=wiring.stream_limits(settings), shared_log=shared_log)
    signer = wiring.webhook_signer(settings, create=True)
    return [
        relay_part.run(stop),
        _projector(store.config, stop, shared_log),
        _dispatcher(settings, store, names, signer).run(stop),
        _sequencer(settings, store, names, audit_key, shared_log).run(stop),
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
    stop = _stop_event()
    in_memory = settings.store == "memory"
    audit_key = None if in_memory else wiring.audit_signer(settings, create=True)
    with ExitStack() as services:
        if in_memory:
            log.warning("LONGHAUL_STORE=memory: tasks are kept in this process only and lost when it stops")
        else:
            settings = _with_embedded_services(settings, services)
        gateway_sock = _listen(settings.host, settings.port)
        port = gateway_sock.getsockname()[1]
        parts: list[Awaitable[None]] = []
        dependencies: list[Awaitable[None]] = []
        dependencies_stop = asyncio.Event()
        if settings.iam_url is None:
            iam_sock = _listen("127.0.0.1", 0)
            settings = settings.model_copy(
                update={"iam_url": f"http://127.0.0.1:{iam_sock.getsockname()[1]}"}
            )
            dependencies.append(_serve(fake_iam_service.create_app(), iam_sock, dependencies_stop))
            log.info("fake IAM at %s", settings.iam_url)
        store = _open_store(settings, pool_size=STORE_POOL_SIZE)
        try:
            metrics = WorkerMetrics()  # the worker's, served by this process's gateway at /metrics
            worker_part = _build_worker(settings, store, metrics)  # the gateway hands it new tasks
            clock = wiring.system_clock(settings)
            async with _gateway_app(settings, store, clock, port, metrics, hand_off=worker_part) as app:
                url = wiring.public_url(settings, port)
                parts += [
                    _serve(app, gateway_sock, stop),
                    _worker(settings, store, stop, process=worker_part),
                    _sweeper(settings, store).run(stop),
                ]
                if not in_memory:
                    assert audit_key is not None
                    parts += _log_followers(settings, store, stop, audit_key)
                _write_services_file(settings, url)
                log.info(
                    "longhaul is up: %s/.well-known/agent-card.json (JSON-RPC at %s/a2a/jsonrpc)", url, url
                )
                if audit_key is not None:
                    log.info(
                        "audit signing key %s; its verifier key: %s", audit_key.name, audit_key.verifier()
                    )
                await _run_all(parts, stop, dependencies=dependencies, dependencies_stop=dependencies_stop)
        finally:
            store.close()
            (settings.data_dir / SERVICES_FILE).unlink(missing_ok=True)
            if in_memory:
                log.info("longhaul stopped; the in-memory tasks are gone (LONGHAUL_STORE=memory)")
            else:
                log.info("longhaul stopped; data kept in %s", settings.data_dir)


def _with_embedded_services(settings: Settings, services: ExitStack, *, nats: bool = True) -> Settings:
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


def _write_services_file(settings: Settings, url: str) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    info = {"database_url": settings.database_url, "nats_url": settings.nats_url, "gateway_url": url}
    (settings.data_dir / SERVICES_FILE).write_text(json.dumps(info, indent=2))


# ---------------------------------------------------------------------- one-shot commands


@contextlib.contextmanager
def _store_for_reading(settings: Settings, command: str) -> Iterator[TaskApplication]:
    """The store: at the configured URL, else at a running ``up``'s, else an embedded one."""
    _needs_postgres(
        settings,
        f"`longhaul {command}`",
        ", the one that runs it, so there is nothing here to read or migrate",
    )
    with ExitStack() as services:
        if settings.database_url is None:
            running = _running_up(settings.data_dir)
            if running is not None:
                settings = settings.model_copy(update={"database_url": running})
            else:
                settings = _with_embedded_services(settings, services, nats=False)
        store = _open_store(settings)
        try:
            yield store
        finally:
            store.close()


def _running_up(data_dir: Path, service: str = "database_url") -> str | None:
    path = data_dir / SERVICES_FILE
    if not path.exists():
        return None
    url = json.loads(path.read_text()).get(service)
    return url if isinstance(url, str) else None


def tail(settings: Settings, **options: Any) -> int:
    """Print live events from NATS (``longhaul/tail.py``): at LONGHAUL_NATS_URL, else a running ``up``'s."""
    if settings.nats_url is None:
        running = _running_up(settings.data_dir, "nats_url")
        if running is None:
            raise CommandError(
                f"LONGHAUL_NATS_URL is not set and no `longhaul up` runs with data in {settings.data_dir}"
            )
        settings = settings.model_copy(update={"nats_url": running})
    names = _names(settings)
    try:
        return asyncio.run(tail_consumer.run(names, **options))
    except LookupError as error:
        raise CommandError(str(error)) from error
    except BrokenPipeError:
        raise  # the reader left: longhaul.cli ends quietly
    except (TimeoutError, OSError, nats.errors.NoServersError) as error:
        raise CommandError(
            f"cannot reach NATS at {names.url} ({error!r}); check LONGHAUL_NATS_URL"
        ) from error


class BadArgumentError(CommandError):
    """A command's argument names nothing there is (a version past the last, say): exit status 2."""


def history(
    settings: Settings,
    task_id: UUID,
    *,
    as_json: bool,
    archive: Path | None = None,
    at_version: int | None = None,
    effects: bool = False,
) -> int:
    """Print a task's events with their actors, its state after a version, or its effects.

    From the store, or from an archive file (``archive``), with the same output
    (``store.evidence.audit_trail``; the state is ``store.public_form.task_state``).
    """
    if archive is not None:
        tenant, events = _archived_events(archive, task_id)
        task = None if at_version is None else _state_from_events(events, task_id, at_version)
        _print_history(tenant, task_id, events, task, as_json=as_json, effects=effects)
        return 0
    with _store_for_reading(settings, "history") as store:
        try:
            tenant = store.get(task_id).tenant
        except TaskNotFoundError:
            raise CommandError(
                f"no task {task_id} in {settings.database_schema}"
                f" (an archived task: longhaul history --archive FILE {task_id})"
            ) from None
        task = None
        if at_version is not None:
            try:
                task = store.task_at(task_id, at_version)
            except NoSuchVersionError as error:
                raise BadArgumentError(f"--at-version {at_version}: {error}") from None
        _print_history(tenant, task_id, store.history(task_id), task, as_json=as_json, effects=effects)
    return 0


def _archived_events(path: Path, task_id: UUID) -> tuple[str, list[DomainEventProtocol[UUID]]]:
    """A task's tenant and events in an archive file, decoded as the store decodes its events."""
    try:
        found = read_archive(path)
    except ArchiveError as error:
        raise CommandError(str(error)) from error
    events = found.tasks.get(task_id)
    if not events:
        raise CommandError(f"no task {task_id} in {path}")
    mapper = TaskApplication(MemoryConfig()).mapper  # the store's transcodings, no database
    return events[0].tenant, [mapper.to_domain_event(e.stored()) for e in events]


def _state_from_events(events: list[DomainEventProtocol[UUID]], task_id: UUID, version: int) -> Task:
    """The task after ``version`` replayed from its events (an archive has no snapshots)."""
    try:
        return replay(events, version)
    except NoSuchVersionError as error:
        raise BadArgumentError(f"--at-version {version}: {error}") from None


def _print_history(
    tenant: str,
    task_id: UUID,
    events: Iterable[DomainEventProtocol[UUID]],
    task: Task | None,
    *,
    as_json: bool,
    effects: bool,
) -> None:
    """The one document (``--json``) or the lines of ``history``, ``--at-version`` or ``--effects``."""
    if task is not None:
        state = task_state_json(task)
        print(dumps(state) if as_json else dumps(state, indent=2))
    elif effects:
        found = effects_of(events)
        if as_json:
            print(dumps(effects_document(task_id, found)))
        elif not found:
            print(f"task {task_id} recorded no run-once side effects")
        for effect in [] if as_json else found:
            print(
                f"v{effect.version:<5} {iso(effect.time)}  {effect.key}  {dumps(effect.to_json()['result'])}"
            )
    elif as_json:
        print(dumps(events_document(task_id, tenant, audit_events(events))))
    else:
        for event in audit_events(events):
            actor = str(event.actor)
            print(
                f"v{event.version:<5} {iso(event.time)}  {event.type:<22} {actor:<28} {dumps(event.fields)}"
            )


def receipt(settings: Settings, task_id: UUID, *, out: Path | None = None) -> int:
    """Print (or write to ``out``) the task's receipt document (``MerkleLog.receipt``)."""
    with _store_for_reading(settings, "receipt") as store:
        try:
            store.get(task_id)
        except TaskNotFoundError:
            raise CommandError(f"no task {task_id} in {settings.database_schema}") from None
        merkle_log = store.merkle_log
        assert merkle_log is not None  # _store_for_reading refuses a memory store
        found = merkle_log.receipt(task_id)
    if found is None:
        raise CommandError(
            f"no signed checkpoint covers task {task_id} yet: the sequencer signs one every"
            " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS; ask again after the next"
        )
    document = found.to_json()
    if out is None:
        sys.stdout.write(document)
        return 0
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot write the receipt to {out}: {error.strerror or error}") from None
    print(f"receipt of task {task_id} at version {found.version} written to {out}")
    return 0


def deliveries(settings: Settings, task_id: UUID, *, as_json: bool) -> int:
    """Print every webhook delivery of a task and each of its attempts."""
    with _store_for_reading(settings, "deliveries") as store:
        try:
            store.get(task_id)
        except TaskNotFoundError:
            raise CommandError(f"no task {task_id} in {settings.database_schema}") from None
        config = store.config
        assert isinstance(config, StoreConfig)
        with psycopg.connect(config.database_url, autocommit=True) as conn:
            found = task_deliveries(conn, config.schema, task_id)
    if as_json:
        for delivery, attempts in found:
            print(dumps(_delivery_json(delivery, attempts)))
        return 0
    if not found:
        print(f"no webhook deliveries for task {task_id} (it has no push config, or none was due yet)")
    for delivery, attempts in found:
        print(
            f"v{delivery.version:<5} {delivery.event_type:<22} config {delivery.config_id}  {delivery.url}  "
            f"{_delivery_state(delivery)}"
        )
        for attempt in attempts:
            result = str(attempt.http_status) if attempt.http_status is not None else "-"
            error = f"  {attempt.error}" if attempt.error else ""
            print(
                f"       attempt {attempt.attempt:<3} {iso(attempt.started_at)}  {result:>3}  "
                f"{attempt.duration_ms:8.1f} ms  {attempt.outcome}{error}"
            )
    return 0


def _delivery_state(delivery: Delivery) -> str:
    if delivery.state == "pending":
        return f"PENDING after {_attempts(delivery.attempts)}, next at {iso(delivery.next_attempt_at)}"
    when = iso(delivery.finished_at) if delivery.finished_at is not None else "?"
    word = {"delivered": "DELIVERED", "gave_up": "GAVE UP", "refused": "REFUSED"}[delivery.state]
    return f"{word} at {when} after {_attempts(delivery.attempts)}"


def _delivery_json(delivery: Delivery, attempts: list[Attempt]) -> dict[str, Any]:
    return {
        "webhookId": delivery.webhook_id,
        "taskId": str(delivery.task_id),
        "tenant": delivery.tenant,
        "version": delivery.version,
        "type": delivery.event_type,
        "configId": delivery.config_id,
        "url": delivery.url,
        "state": delivery.state,
        "attempts": [
            {
                "attempt": a.attempt,
                "time": iso(a.started_at),
                "durationMs": round(a.duration_ms, 3),
                "httpStatus": a.http_status,
                "error": a.error,
                "outcome": a.outcome,
                "dispatcher": a.dispatcher,
            }
            for a in attempts
        ],
        "createdAt": iso(delivery.created_at),
        "nextAttemptAt": iso(delivery.next_attempt_at) if delivery.state == "pending" else None,
        "finishedAt": iso(delivery.finished_at) if delivery.finished_at is not None else None,
        "lastStatus": delivery.last_status,
        "lastError": delivery.last_error,
    }


def archive(settings: Settings, directory: Path) -> int:
    """Archive every expired task to one verified file in ``directory``, then purge them.

    1 if a task was refused for a fault in its chain (named on stderr), else 0.
    """
    with _store_for_reading(settings, "archive") as store:
        try:
            run = archive_expired(store, directory, clock=wiring.system_clock(settings))
        except ArchiveError as error:
            raise CommandError(str(error)) from error
    left = (
        f"; {len(run.unsequenced)} not yet in a signed checkpoint and stay" if run.unsequenced else ""
    ) + (f"; {len(run.refused)} refused for faults (named above), not archived" if run.refused else "")
    for faults in run.refused.values():
        for fault in faults:
            print(f"refused: {fault}", file=sys.stderr)
    if run.path is None:
        print(("nothing archived" + left) if left else "no expired tasks: nothing archived")
        return 1 if run.refused else 0
    print(run.path)
    print(
        f"archived {run.tasks} tasks ({run.events} events), verified; purged {len(run.purged)}"
        + (f"; {len(run.skipped)} changed meanwhile and stay" if run.skipped else "")
        + left,
        file=sys.stderr,
    )
    return 1 if run.refused else 0


VERIFY_PROGRESS_S = 2.0
"""``verify`` reports progress on stderr at most this often (a store checked in less says nothing)."""
VERIFY_NAMED_LIMIT = 100_000
"""Chain faults remembered so that the log audit does not name their versions again (beyond: it may)."""


def verify(settings: Settings, archive: Path | None = None) -> int:
    """Check every chain and the Merkle log against the signed checkpoints; 1 if any fault, else 0.

    With ``archive``: the file's chains and (format version 3) receipts instead.
    """
    if archive is not None:
        return _verify_archive(settings, archive)
    with _store_for_reading(settings, "verify") as store:
        recorder = store.recorder
        merkle_log = store.merkle_log
        assert isinstance(recorder, PostgresRunQueueRecorder)
        assert merkle_log is not None
        signed = merkle_log.latest_checkpoint() is not None
        keys = _verifier_keys(settings, needed=signed)
        where = f"schema {settings.database_schema}"
        named: set[tuple[UUID, int]] = set()
        chains = _verify(recorder.chained_histories(), where, named=named, summary=False)
        checked = _verify_log(merkle_log, LogAuditReads(recorder), keys, named)
    counts = (
        f"{chains.tasks} tasks, {chains.events} events, {checked.leaves} leaves, {checked.checkpoints}"
        f" checkpoints, {checked.purged} purged, {checked.unsequenced} not yet sequenced"
    )
    if not signed:
        print(f"{where}: no signed checkpoint yet: only the chains were checked against the log")
    faults = chains.faults + checked.faults
    if faults:
        print(
            f"{where}: {faults} faults ({chains.faults} in chains,"
            f" {checked.faults} in the signed log; {counts})"
        )
    else:
        print(f"{where}: every chain and the signed log verify ({counts})")
    return 1 if faults else 0


def _verifier_keys(settings: Settings, *, needed: bool) -> list[VerifierKey]:
    """The keys checkpoints verify with; a ``CommandError`` when there are checkpoints and none."""
    keys = wiring.audit_verifier_keys(settings)
    if needed and not keys:
        raise CommandError(
            "no verifier key to check the signed checkpoints with: set LONGHAUL_AUDIT_KEY_FILE"
            " (the signer key's file) or LONGHAUL_AUDIT_VERIFIER_KEYS"
        )
    return keys


def _verify_log(
    merkle_log: MerkleLog, reads: LogAuditReads, keys: Sequence[VerifierKey], named: set[tuple[UUID, int]]
) -> LogReport:
    started = last = time.monotonic()

    def progress(report: LogReport) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= VERIFY_PROGRESS_S:
            last = now
            print(
                f"verify: {report.leaves} leaves checked ({now - started:.0f} s),"
                f" {report.faults} faults so far",
                file=sys.stderr,
                flush=True,
            )

    return audit_store(merkle_log, reads, keys, named=named, on_fault=print, on_page=progress)


def _verify_archive(settings: Settings, path: Path) -> int:
    """Check an archive file: every task's chain, and (format version 3) its receipt with the keys."""
    try:
        version, histories = archive_histories(path)
        keys = _verifier_keys(settings, needed=version >= 3)
        receipts: dict[UUID, tuple[Receipt | None, ChainRow | None]] = {}

        def pairs() -> Iterator[tuple[UUID, Sequence[ChainRow]]]:
            for history in histories:
                receipts[history.task_id] = (history.receipt, history.rows[-1] if history.rows else None)
                yield history.task_id, history.rows

        chains = _verify(pairs(), str(path), summary=version < 3)
    except ArchiveError as error:
        raise CommandError(str(error)) from error
    if version < 3:
        return 1 if chains.faults else 0
    faults = 0
    for task_id, (receipt, last) in receipts.items():
        for fault in receipt_faults(task_id, receipt, last, keys):
            faults += 1
            print(fault)
    counts = f"{chains.tasks} tasks, {chains.events} events, {len(receipts)} receipts"
    if chains.faults + faults:
        print(
            f"{path}: {chains.faults + faults} faults ({chains.faults} in chains,"
            f" {faults} in receipts; {counts})"
        )
        return 1
    print(f"{path}: every chain and receipt verifies ({counts})")
    return 0


def _verify(
    histories: Iterable[tuple[UUID, Sequence[ChainRow]]],
    where: str,
    *,
    named: set[tuple[UUID, int]] | None = None,
    summary: bool = True,
) -> ChainReport:
    started = last = time.monotonic()

    def progress(report: ChainReport) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= VERIFY_PROGRESS_S:
            last = now
            print(
                f"verify: {report.tasks} tasks, {report.events} events checked ({now - started:.0f} s),"
                f" {report.faults} faults so far",
                file=sys.stderr,
                flush=True,
            )

    def fault(found: ChainFault) -> None:
        print(found)
        if named is not None and len(named) < VERIFY_NAMED_LIMIT:
            named.add((found.task_id, found.version))

    report = verify_chains(histories, on_fault=fault, on_task=progress)
    if not summary:
        return report
    if report.faults:
        print(
            f"{where}: {report.faults} faults in {report.faulty_tasks} of {report.tasks} tasks"
            f" ({report.events} events checked)"
        )
    else:
        print(f"{where}: every chain verifies ({report.tasks} tasks, {report.events} events)")
    return report


def skills(settings: Settings) -> int:
    """Print every skill version with its live task count, and what this release lacks."""
    registry = wiring.build_registry(settings)
    with _store_for_reading(settings, "skills") as store:
        uses = version_use(store, registry)
    print(f"{'SKILL':<20} {'VERSION':>7} {'LIVE TASKS':>10}  STATUS")
    newest = {s.name: registry.newest(s.name).version for s in registry.all()}
    for use in uses:
        if not use.registered:
            status = "MISSING from this release: a worker refuses to start"
        elif newest.get(use.skill) == use.version:
            status = "newest: new tasks start here"
        elif use.live_tasks:
            status = "draining"
        else:
            status = "drained: can be removed"
        print(f"{use.skill:<20} {use.version:>7} {use.live_tasks:>10}  {status}")
    return 0


def migrate(settings: Settings) -> int:
    """Apply pending schema migrations (opening the store does) and print what was applied."""
    with _store_for_reading(settings, "migrate") as store:
        report = store.schema_migrations
    assert report is not None
    for migration in report.applied:
        print(f"applied {migration.label}")
    if report.applied:
        print(f"schema {report.schema}: migrated from version {report.found} to {report.version}")
    else:
        print(f"schema {report.schema}: at version {report.version}, nothing to apply")
    return 0


def projections(settings: Settings, action: str) -> int:
    """``rebuild`` the projections from the log, or print their ``status`` (position and lag)."""
    with _store_for_reading(settings, f"projections {action}") as store:
        if action == "rebuild":
            for label, rebuilt in rebuild_all(store):
                print(f"{label}: rebuilt {rebuilt.tasks} tasks up to log position {rebuilt.position}")
        found = lags(store)
    for kept, lag in found:
        print(f"{kept.label}: at log position {lag.position} of {lag.log_position} ({lag.behind} behind)")
    return 0


def keys_new(tenant: str) -> int:
    """Mint an API key for ``tenant``: the key for the client, then the key file line for the server."""
    try:
        minted = mint_key(tenant)
    except ApiKeyError as error:
        raise CommandError(str(error)) from None
    print(f"key (give it to the client; it is not stored anywhere): {minted.key}")
    print(f"key id (recorded in the events of its calls; longhaul history shows it): {minted.key_id}")
    print(f"key file line (append it to LONGHAUL_API_KEY_FILE, then restart the gateways): {minted.line}")
    return 0


def erase(settings: Settings, tenant: str) -> int:
    """Destroy the secret keys of every task of ``tenant``: their sealed parts become unreadable.

    The events stay (the ciphertext with them, so every chain still verifies); a live task whose
    next step needs a destroyed secret fails, saying so.
    """
    with _store_for_reading(settings, "erase") as store:
        erased = store.erase_tenant(tenant)
    print(f"erased the keys of {erased} tasks of tenant {tenant}: their secrets can no longer be read")
    return 0


def _attempts(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


def _needs_postgres(settings: Settings, who: str, why: str) -> None:
    """Refuse ``who`` over an in-memory store, saying ``why`` it has nothing to work on there."""
    if settings.store == "memory":
        raise CommandError(
            f"{who} needs LONGHAUL_STORE=postgres: an in-memory store lives inside one process{why}"
        )
