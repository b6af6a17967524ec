"""Builds the parts from ``Settings``: the one place that wires.

Only the composition root (``longhaul``) reads settings; the processes and commands get their
store, gateway app, worker, relay, sequencer, dispatcher and sweeper from here.

Longer than 500 lines on purpose: it is the composition root, one builder per part from the
settings; split, a reader would have to hunt for where a setting is read.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from eventsourcing.persistence import OperationalError as StoreOperationalError

from api.api_keys import ApiKeyError, KeyRing, parse_key_file, parse_pairs
from api.app import create_app
from api.config import GatewayConfig
from api.service import DEFAULT_TENANT
from api.task_feed import StoreLog, TaskFeed
from api.waiting import FeedWaiter
from domain.clock import Clock
from domain.skill import Skill, SkillRegistry
from longhaul.errors import CommandError
from longhaul.settings import Settings
from projections.shared_log import SharedLog
from store.evidence import (
    CheckpointError,
    KeyFileError,
    NoteError,
    SignerKey,
    VerifierKey,
    create_signer_key,
    load_signer_key,
    longhaul_origin,
)
from store.files import FileStore
from store.log import (
    MemoryConfig,
    RetentionPolicy,
    SchemaTooNewError,
    StoreConfig,
    TaskApplication,
    webhook_retry,
)
from store.public_form import FileLinks, NatsNames
from workers.dispatcher import DispatchConfig, Dispatcher, DispatcherUnavailableError
from workers.metrics import WorkerMetrics
from workers.relay import Relay, RelayUnavailableError, StreamLimits
from workers.sequencer import Sequencer, SequencerUnavailableError
from workers.skills import builtin_skills
from workers.step_files import StepFiles
from workers.sweeper import Sweeper
from workers.task_runner import DEFAULT_STEP_RETRY, RunPolicy
from workers.webhook_signing import WebhookSigner, new_secret, secret_key
from workers.worker import Worker, WorkerConfig

log = logging.getLogger("longhaul")

STORE_POOL_SIZE = 8
"""Connections a process keeps open (plus as many again on demand). Store calls run in asyncio's
default thread pool (a few threads), so more connections would only sit idle."""
PROJECTOR_POOL_SIZE = 2
"""Connections the projector's store keeps (plus as many again on demand): its subscription's
LISTEN (in ``up``, the shared subscription's, on the store's pool), its reads of the log and the
views' shared transactions (``projections.projector``)."""


class ConfigurationError(Exception):
    """The settings name something that cannot be built; the message says what and how to fix it."""


def key_ring(settings: Settings) -> KeyRing | None:
    """The API keys of ``LONGHAUL_API_KEYS`` and ``LONGHAUL_API_KEY_FILE`` together; None if neither.

    The key file is read now: a missing file or a bad line stops the start with its path and
    line number.
    """
    keys = parse_pairs(settings.api_keys.get_secret_value()) if settings.api_keys is not None else []
    path = settings.api_key_file
    if path is not None:
        try:
            keys += parse_key_file(path.read_text())
        except OSError as error:
            raise ConfigurationError(f"LONGHAUL_API_KEY_FILE {path}: {error.strerror or error}") from None
        except (ApiKeyError, UnicodeDecodeError) as error:
            raise ConfigurationError(f"LONGHAUL_API_KEY_FILE {path}: {error}") from None
        if not keys:  # an empty file must not open the gateway to everyone
            raise ConfigurationError(f"LONGHAUL_API_KEY_FILE {path} holds no keys")
    if not keys:
        return None
    try:
        return KeyRing(keys)
    except ApiKeyError as error:
        raise ConfigurationError(f"API keys (LONGHAUL_API_KEYS, LONGHAUL_API_KEY_FILE): {error}") from None


def system_clock(settings: Settings) -> Clock:
    """The wall clock, moved by ``LONGHAUL_CLOCK_OFFSET_SECONDS`` (drills and tests only)."""
    offset = timedelta(seconds=settings.clock_offset_seconds)

    def now() -> datetime:
        return datetime.now(UTC) + offset

    return now


def store_config(
    settings: Settings, *, pool_size: int = 5, cache_size: int = 0, pre_ping: bool = False
) -> StoreConfig | MemoryConfig:
    """Where the event store lives: ``LONGHAUL_STORE`` chooses PostgreSQL or this process's memory."""
    if settings.store == "memory":
        return MemoryConfig(cache_size=cache_size)
    if settings.database_url is None:
        raise ConfigurationError(
            "LONGHAUL_DATABASE_URL is not set (only `longhaul up` starts an embedded PostgreSQL)"
        )
    return StoreConfig(
        database_url=settings.database_url,
        schema=settings.database_schema,
        pool_size=pool_size,
        max_overflow=pool_size,
        cache_size=cache_size,
        pre_ping=pre_ping,
    )


def build_store(
    settings: Settings, *, pool_size: int = 5, cache_size: int = 0, pre_ping: bool = False
) -> TaskApplication:
    """Open the event store (on PostgreSQL, creating or migrating its tables first)."""
    return TaskApplication(
        store_config(settings, pool_size=pool_size, cache_size=cache_size, pre_ping=pre_ping)
    )


def nats_names(settings: Settings) -> NatsNames:
    """The deployment's NATS URL, stream and subject prefix."""
    if settings.nats_url is None:
        raise ConfigurationError("LONGHAUL_NATS_URL is not set (only `longhaul up` starts an embedded NATS)")
    return NatsNames(
        url=settings.nats_url, stream=settings.nats_stream, subject_prefix=settings.nats_subject_prefix
    )


def stream_limits(settings: Settings) -> StreamLimits:
    """The limits the relay keeps the stream at."""
    return StreamLimits(max_age=settings.nats_max_age, replicas=settings.nats_replicas)


def build_registry(settings: Settings) -> SkillRegistry:
    """The built-in skills plus those of every module in ``LONGHAUL_SKILL_MODULES``.

    A skill module exposes ``SKILLS``: a list of ``domain.skill.Skill``.
    """
    registry = SkillRegistry(builtin_skills(settings.iam_url))
    for module_name in settings.skill_modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigurationError(
                f"LONGHAUL_SKILL_MODULES: cannot import {module_name!r} ({error}); "
                "is it on PYTHONPATH or installed?"
            ) from error
        skills = getattr(module, "SKILLS", None)
        if not isinstance(skills, list) or not all(isinstance(s, Skill) for s in skills):
            raise ConfigurationError(
                f"skill module {module_name} must define SKILLS as a list of domain.skill.Skill"
            )
        for skill in skills:
            registry.register(skill)
    return registry


def retention_policy(settings: Settings) -> RetentionPolicy:
    """``LONGHAUL_RETENTION`` with its ``LONGHAUL_RETENTION_OVERRIDES`` (validated by ``Settings``)."""
    return RetentionPolicy.of_settings(settings.retention, settings.retention_overrides)


def run_policy(settings: Settings) -> RunPolicy:
    """How runners treat pauses and failing or hanging steps (the service's defaults)."""
    return RunPolicy(
        max_pause=settings.max_pause,
        step_retry=replace(DEFAULT_STEP_RETRY, max_attempts=settings.step_max_attempts),
        step_timeout=settings.step_timeout,
    )


def worker_config(settings: Settings) -> WorkerConfig:
    """A worker's identity (host:pid:random) and limits."""
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    return WorkerConfig(
        worker_id=worker_id,
        lease_seconds=settings.lease_seconds,
        concurrency=settings.worker_concurrency,
        grace_seconds=settings.worker_grace_seconds,
    )


def public_url(settings: Settings, port: int | None = None) -> str:
    """The base URL clients reach the gateway at."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host  # noqa: S104
    return f"http://{host}:{port if port is not None else settings.port}"


WEBHOOK_SECRET_FILE = "webhook-secret"  # noqa: S105 - a file name
"""The default webhook secret `longhaul up` makes in the data directory when none is set."""


def webhook_signer(settings: Settings, *, create: bool = False) -> WebhookSigner:
    """The webhook secrets: ``LONGHAUL_WEBHOOK_SECRET(S)``, else the data directory's secret file.

    With ``create`` (``longhaul up``) a missing file is made with a fresh secret (mode 0600).
    """
    default = settings.webhook_secret
    if default is None:
        path = settings.data_dir / WEBHOOK_SECRET_FILE
        if path.exists():
            default = path.read_text().strip()
            try:
                secret_key(default)
            except ValueError as error:
                raise ConfigurationError(f"{path}: {error}") from None
        elif create:
            default = _write_secret(path)
        else:
            raise ConfigurationError(
                "LONGHAUL_WEBHOOK_SECRET is not set and there is no "
                f"{path} (which `longhaul up` makes): set it to a secret such as {new_secret()}"
            )
    return WebhookSigner(default=default, per_tenant=dict(settings.webhook_secrets))


def _write_secret(path: Path) -> str:
    secret = new_secret()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as file:
        path.chmod(0o600)
        file.write(secret + "\n")
    return secret


def dispatch_config(settings: Settings) -> DispatchConfig:
    """A dispatcher's identity (host:pid:random), retry policy and limits."""
    return DispatchConfig(
        dispatcher_id=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
        policy=webhook_retry(
            total_s=settings.webhook_retry_for.total_seconds(),
            first_delay_s=settings.webhook_retry_first_delay_seconds,
            max_delay_s=settings.webhook_retry_max_delay_seconds,
        ),
        timeout_s=settings.webhook_timeout_seconds,
        concurrency=settings.webhook_concurrency,
        allow_private=settings.allow_private_webhooks,
    )


AUDIT_KEY_FILE = "audit-key"
"""The checkpoint signing key `longhaul up` makes in the data directory when none is set."""


def audit_signer(settings: Settings, *, create: bool = False) -> SignerKey:
    """The key that signs checkpoints: ``LONGHAUL_AUDIT_KEY_FILE``, else the data directory's key file.

    With ``create`` (``longhaul up``) a missing ``<data dir>/audit-key`` is made (mode 0600), named
    ``longhaul/<host name>``, the origin of its checkpoints. A configured file is never made: a
    mistyped path must not start a log under a new key.
    """
    path = settings.audit_key_file or settings.data_dir / AUDIT_KEY_FILE
    try:
        if settings.audit_key_file is None and create and not path.exists():
            return create_signer_key(path, longhaul_origin(deployment_name(socket.gethostname())))
        return load_signer_key(path)
    except (KeyFileError, CheckpointError) as error:
        hint = (
            "" if settings.audit_key_file else " (LONGHAUL_AUDIT_KEY_FILE is unset; `longhaul up` makes it)"
        )
        raise ConfigurationError(f"{error}{hint}") from None


def audit_verifier_keys(settings: Settings) -> list[VerifierKey]:
    """The keys checkpoints verify with: the signer key's verifier, then ``LONGHAUL_AUDIT_VERIFIER_KEYS``.

    The signer key's file is read when it exists (``LONGHAUL_AUDIT_KEY_FILE``, else the data
    directory's); a process without it (a gateway on another machine) names the current key in
    ``LONGHAUL_AUDIT_VERIFIER_KEYS`` too.
    """
    keys: list[VerifierKey] = []
    path = settings.audit_key_file or settings.data_dir / AUDIT_KEY_FILE
    if settings.audit_key_file is not None or path.exists():
        keys.append(audit_signer(settings).verifier())
    for text in settings.audit_verifier_keys:
        try:
            keys.append(VerifierKey.parse(text))
        except NoteError as error:
            raise ConfigurationError(f"LONGHAUL_AUDIT_VERIFIER_KEYS: {error}") from None
    return keys


def deployment_name(host: str) -> str:
    """A host name as a deployment name for a checkpoint origin: lowercase, other characters as ``-``."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "-" for c in host.lower())
    return name.strip(".-") or "local"


def needs_postgres(settings: Settings, who: str, why: str) -> None:
    """Refuse ``who`` over an in-memory store, saying ``why`` it has nothing to work on there."""
    if settings.store == "memory":
        raise CommandError(
            f"{who} needs LONGHAUL_STORE=postgres: an in-memory store lives inside one process{why}"
        )


def open_store(settings: Settings, *, pool_size: int = 5) -> TaskApplication:
    """``build_store``, its failures said for the operator (the URL without its password)."""
    try:
        return build_store(settings, pool_size=pool_size)
    except (ConfigurationError, SchemaTooNewError) as error:
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


@contextlib.asynccontextmanager
async def gateway_app(
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
    registry = build_registry(settings)
    api_keys = key_ring(settings)
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
            feed = await TaskFeed.connect(nats_names(settings), StoreLog(store))
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
                public_url=public_url(settings, port),
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
                audit_verifier_keys=audit_verifier_keys(settings),
                hand_off=hand_off,
                files=file_store(settings),
                max_upload_bytes=settings.max_upload_bytes,
                file_url_expiry=settings.file_url_expiry,
            )
        )
    finally:
        if feed is not None:
            await feed.close()


def file_store(settings: Settings) -> FileStore:
    """The file store: ``LONGHAUL_FILE_STORE_URL``, else a directory under the data directory."""
    url = settings.file_store_url or (settings.data_dir / "files").resolve().as_uri()
    try:
        return FileStore.from_url(url)
    except (ValueError, OSError) as error:
        raise ConfigurationError(f"LONGHAUL_FILE_STORE_URL={url}: {_first_line(error)}") from None


def build_worker(settings: Settings, store: TaskApplication, metrics: WorkerMetrics | None = None) -> Worker:
    """A worker over ``store`` with this release's skills."""
    return Worker(
        metrics=metrics,
        store=store,
        registry=build_registry(settings),
        clock=system_clock(settings),
        config=worker_config(settings),
        policy=run_policy(settings),
        files=StepFiles(
            file_store(settings),
            inline_max_bytes=settings.file_inline_max_bytes,
            allow_private=settings.allow_private_webhooks,
        ),
    )


def build_sweeper(settings: Settings, store: TaskApplication) -> Sweeper:
    """The sweeper: ends due pauses, expires tasks past their retention."""
    return Sweeper(
        store=store,
        clock=system_clock(settings),
        retention=retention_policy(settings),
        interval=settings.sweep_interval_seconds,
    )


def build_relay(
    settings: Settings, store: TaskApplication, names: NatsNames, shared_log: SharedLog | None = None
) -> Relay:
    """The relay from ``store`` to the deployment's NATS stream."""
    try:
        return Relay(store=store, names=names, limits=stream_limits(settings), shared_log=shared_log)
    except RelayUnavailableError as error:
        raise CommandError(str(error)) from error


def build_sequencer(
    settings: Settings,
    store: TaskApplication,
    names: NatsNames,
    signer: SignerKey,
    shared_log: SharedLog | None = None,
) -> Sequencer:
    """The sequencer: keeps the Merkle tree over the log, signs checkpoints with ``signer``."""
    try:
        return Sequencer(
            store=store,
            names=names,
            signer=signer,
            clock=system_clock(settings),
            interval=settings.checkpoint_interval_seconds,
            gather=settings.sequencer_gather_seconds,
            limits=stream_limits(settings),
            shared_log=shared_log,
        )
    except SequencerUnavailableError as error:
        raise CommandError(str(error)) from error


def file_links(settings: Settings, port: int | None = None) -> FileLinks:
    """The URLs clients fetch stored files at: the gateway's (``public_url``), or pre-signed on S3."""
    files = file_store(settings)
    return FileLinks(
        public_url(settings, port), sign=functools.partial(files.signed_url, expires=settings.file_url_expiry)
    )


def build_dispatcher(
    settings: Settings,
    store: TaskApplication,
    names: NatsNames,
    signer: WebhookSigner,
    port: int | None = None,
) -> Dispatcher:
    """The webhook dispatcher, signing with ``signer``; its bodies' files link to the gateway on ``port``."""
    try:
        return Dispatcher(
            store=store,
            names=names,
            signer=signer,
            config=dispatch_config(settings),
            clock=system_clock(settings),
            limits=stream_limits(settings),
            links=file_links(settings, port),
        )
    except DispatcherUnavailableError as error:
        raise CommandError(str(error)) from error
