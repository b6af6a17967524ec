"""The gateway's configuration: everything ``api.app.create_app`` builds the gateway from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeAlias, TypeVar

from litestar.di import NamedDependency
from litestar.params import SkipValidation
from prometheus_client import CollectorRegistry

from api.api_keys import KeyRing
from api.bodies import DEFAULT_MAX_BODY_BYTES
from api.hand_off import HandOff
from api.overload import DEFAULT_LIMIT, DEFAULT_TARGET_S
from api.streams import DEFAULT_MAX_PENDING
from api.task_feed import TaskFeed
from api.waiting import TaskWaiter
from domain.clock import Clock
from domain.skill import SkillRegistry
from store.evidence import VerifierKey
from store.files import FileStore
from store.log import TaskApplication

JSON_MEDIA_TYPE = "application/json"

T = TypeVar("T")

Injected: TypeAlias = NamedDependency[SkipValidation[T]]
"""A handler parameter the gateway injects by its name (``api.app.create_app``'s dependencies).

A value ``create_app`` made and typed itself, so Litestar does not validate it per request.
"""

DEFAULT_MAX_UPLOAD_BYTES = 5 * 1024**3
"""The default of ``LONGHAUL_MAX_UPLOAD_BYTES``: the largest file a client may upload (5 GiB)."""

DEFAULT_FILE_URL_EXPIRY = timedelta(minutes=15)
"""The default of ``LONGHAUL_FILE_URL_EXPIRY``: how long a pre-signed file URL (S3) is valid."""

DEFAULT_KEEPALIVE_S = 15.0
"""Seconds an idle stream waits before a ``: keepalive`` comment (``LONGHAUL_STREAM_KEEPALIVE_SECONDS``)."""


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """One gateway: its store, skills and clock, its card's claims, its keys, limits and streams.

    ``waiter`` wakes blocking SendMessage calls when their task changes (default: polling the
    log). ``blocking_timeout_s`` bounds how long a blocking call waits before answering with the
    task as it is. ``max_pause`` is the deadline of pauses that name none; the workers apply it,
    the gateway declares it on the card, with ``retention`` (the default retention;
    ``retention_overridden`` when per-tenant or per-skill overrides exist). ListTasks reads the
    current-task view in ``store``'s schema (through ``store``'s pool); over a memory store it is
    unsupported.
    ``/metrics`` reports the relay's lag for ``relay_stream`` (and any stream the relay's position
    table names), and the metrics of ``process_metrics`` (this process's worker, say) besides.
    ``allow_private_webhooks`` lets push notification URLs point at non-public addresses.
    ``api_keys`` are the bearer keys callers authenticate with, each mapped to its tenant
    (``api.authentication``); without them every caller is the open development tenant.
    Past ``max_in_flight`` requests in flight a request is answered 429 (``api.overload``), and
    past fewer while the shortest sojourn of the gateway's requests exceeds ``overload_target_s``.
    ``max_body_bytes`` bounds a request body on both bindings; ``rest_media_type`` is the
    Content-Type of the HTTP+JSON binding's answers.
    With a task ``feed`` (NATS, over a PostgreSQL store) the gateway streams
    (``api.streams``): a comment every ``stream_keepalive_s`` on an idle stream, and a stream
    closed when more than ``stream_max_pending`` events wait for its reader.
    ``audit_verifier_keys`` are the keys the log's checkpoints verify with (the current one
    first): ``/audit/v1/log-key`` serves them, the timeline page verifies receipts with them.
    ``hand_off`` is this process's worker, which takes blocking sends' new tasks into a free slot
    (``api.hand_off``; ``longhaul up``).
    ``files`` is the file store the gateway serves stored files from and uploads to (``api.files``;
    without one, both answer 404): an upload is at most ``max_upload_bytes``; on a store that
    signs (S3), answers give pre-signed URLs valid for ``file_url_expiry``.
    """

    store: TaskApplication
    registry: SkillRegistry
    clock: Clock
    default_skill: str
    max_pause: timedelta
    retention: timedelta
    public_url: str
    waiter: TaskWaiter | None = None
    blocking_timeout_s: float = 600
    relay_stream: str | None = None
    process_metrics: CollectorRegistry | None = None
    allow_private_webhooks: bool = False
    retention_overridden: bool = False
    api_keys: KeyRing | None = None
    max_in_flight: int = DEFAULT_LIMIT
    overload_target_s: float = DEFAULT_TARGET_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rest_media_type: str = JSON_MEDIA_TYPE
    feed: TaskFeed | None = None
    stream_keepalive_s: float = DEFAULT_KEEPALIVE_S
    stream_max_pending: int = DEFAULT_MAX_PENDING
    audit_verifier_keys: Sequence[VerifierKey] = ()
    hand_off: HandOff | None = None
    files: FileStore | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    file_url_expiry: timedelta = DEFAULT_FILE_URL_EXPIRY
