"""Settings from the environment (prefix ``LONGHAUL_``), typed and validated at start."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.api_keys import parse_pairs
from api.bodies import DEFAULT_MAX_BODY_BYTES
from api.config import DEFAULT_FILE_URL_EXPIRY, DEFAULT_MAX_UPLOAD_BYTES
from api.overload import DEFAULT_LIMIT, DEFAULT_TARGET_S
from store.log import parse_key
from store.public_form import server_urls
from workers.webhook_signing import secret_key

PREFIX = "LONGHAUL_"
"""Every setting is ``PREFIX + field name``, upper case, in the environment."""


class Settings(BaseSettings):
    """Every knob an operator can turn. Each field is ``LONGHAUL_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", validate_default=True)

    store: Literal["postgres", "memory"] = Field(
        default="postgres",
        description=(
            "Where tasks are kept: postgres (at LONGHAUL_DATABASE_URL), or memory: inside this one"
            " process only, so nothing is kept when it stops and no other process sees the tasks"
            " (tests and demos; the relay refuses it)."
        ),
    )
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL (postgresql://user:pass@host:port/db). Unset: embedded PostgreSQL.",
    )
    database_schema: str = Field(default="public", description="Schema that holds longhaul's tables.")
    nats_url: str | None = Field(
        default=None,
        description="NATS URL (nats://host:port), or several, comma-separated. Unset: embedded NATS.",
    )
    nats_stream: str = Field(default="LONGHAUL_TASKS", description="JetStream stream for task events.")
    nats_subject_prefix: str = Field(
        default="longhaul", description="Subjects are <prefix>.tasks.<tenant>.<task>."
    )
    nats_max_age: timedelta = Field(
        default=timedelta(days=7),
        description="How long the stream keeps an event (the log keeps every event for good).",
    )
    nats_replicas: int = Field(default=1, ge=1, le=5, description="Copies of the stream in a NATS cluster.")
    host: str = Field(default="127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port the gateway listens on.")
    public_url: str | None = Field(default=None, description="Base URL clients reach the gateway at.")
    lease_seconds: float = Field(default=30.0, gt=0, description="Length of a worker's lease on a task.")
    worker_concurrency: int = Field(default=8, ge=1, le=1024, description="Tasks one worker runs at once.")
    worker_grace_seconds: float = Field(
        default=10.0, ge=0, description="SIGTERM: time for running steps to commit."
    )
    data_dir: Path = Field(default=Path(".longhaul"), description="Embedded services' data.")
    file_store_url: str | None = Field(
        default=None,
        description=(
            "Where files (artifacts, uploads) are kept: file:///dir or s3://bucket/prefix (credentials,"
            " region and endpoint the usual AWS way). Unset: LONGHAUL_DATA_DIR/files."
        ),
    )
    file_inline_max_bytes: int = Field(
        default=16384,
        ge=0,
        le=1048576,
        description="A file a step writes of at most this many bytes is kept inline in its event (raw).",
    )
    max_upload_bytes: int = Field(
        default=DEFAULT_MAX_UPLOAD_BYTES,
        ge=1,
        description=(
            "Largest file a client may upload (POST /a2a/files, streamed; larger: refused, HTTP 413,"
            " nothing kept). Not bounded by LONGHAUL_MAX_BODY_BYTES."
        ),
    )
    file_url_expiry: timedelta = Field(
        default=DEFAULT_FILE_URL_EXPIRY,
        gt=timedelta(0),
        le=timedelta(days=7),
        description=(
            "How long a pre-signed URL of a stored file is valid, where answers give them (a file"
            " store on S3); a directory's files are served by the gateway at /a2a/files."
        ),
    )
    default_skill: str = Field(default="echo", description="Skill for messages that name none.")
    max_pause: timedelta = Field(
        default=timedelta(days=7), description="Deadline of a pause that names none."
    )
    step_max_attempts: int = Field(
        default=5,
        ge=1,
        le=1000,
        description=(
            "Attempts at a step (raised, timed out, or its worker lost) before its task fails, unless"
            " its skill or the step sets its own."
        ),
    )
    step_timeout: timedelta = Field(
        default=timedelta(hours=1),
        description=(
            "How long a step may run without a commit before it is cancelled (a failed attempt),"
            " unless its skill or the step sets its own."
        ),
    )
    skill_modules: list[str] = Field(
        default_factory=list, description="Import paths of extra modules that define SKILLS (JSON list)."
    )
    iam_url: str | None = Field(
        default=None, description="Base URL of the IAM the access-review skill calls."
    )
    sweep_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often the sweeper looks for work."
    )
    checkpoint_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often the sequencer signs a checkpoint of the Merkle tree, when it grew.",
    )
    sequencer_gather_seconds: float = Field(
        default=0.5,
        ge=0,
        description=(
            "How long the sequencer keeps taking events after the first of a batch before it appends"
            " them all in one transaction (0: each batch as it arrives)."
        ),
    )
    clock_offset_seconds: float = Field(
        default=0.0, description="Moves every clock of this process (drills and tests of long pauses only)."
    )
    retention: timedelta = Field(default=timedelta(days=30), description="Terminal tasks expire after this.")
    retention_overrides: dict[str, timedelta] = Field(
        default_factory=dict,
        description=(
            'Retention per tenant or skill (JSON object): {"tenant:acme": "P90D", "skill:research": "P1D",'
            ' "tenant:acme,skill:research": "P7D"}; the most specific key wins.'
        ),
    )
    allow_private_webhooks: bool = Field(
        default=False,
        description=(
            "Accept push notification URLs whose host is loopback, private, link-local or otherwise"
            " not public (tests, conformance runs, webhooks on a private network)."
        ),
    )
    webhook_secret: str | None = Field(
        default=None,
        description=(
            "Secret (whsec_<base64>) that signs webhooks of tenants without one of their own. Unset:"
            " `up` makes one in LONGHAUL_DATA_DIR/webhook-secret; `dispatcher` reads that file."
        ),
    )
    webhook_secrets: dict[str, str] = Field(
        default_factory=dict,
        description='Webhook secret per tenant (JSON object): {"acme": "whsec_..."}.',
    )
    webhook_retry_for: timedelta = Field(
        default=timedelta(days=1),
        description="How long a webhook delivery is retried before it is given up.",
    )
    webhook_retry_first_delay_seconds: float = Field(
        default=1.0, gt=0, description="Pause after a webhook's first failed attempt (it doubles each time)."
    )
    webhook_retry_max_delay_seconds: float = Field(
        default=3600.0, gt=0, description="The longest pause between two attempts of a webhook."
    )
    webhook_timeout_seconds: float = Field(
        default=10.0, gt=0, description="How long one webhook attempt may take."
    )
    webhook_concurrency: int = Field(
        default=128, ge=1, le=1024, description="Webhook deliveries one dispatcher makes at once."
    )
    api_keys: SecretStr | None = Field(
        default=None,
        description=(
            "API keys in the clear as tenant=key pairs, comma-separated (development and tests; in"
            " production use LONGHAUL_API_KEY_FILE). No keys at all: one open dev tenant."
        ),
    )
    api_key_file: Path | None = Field(
        default=None,
        description=(
            "File of accepted API keys, one 'NAME TENANT sha256:HEX' line each (digests only;"
            " `longhaul keys new TENANT` prints a line). Read at start."
        ),
    )
    max_in_flight: int = Field(
        default=DEFAULT_LIMIT,
        ge=1,
        description="Requests one gateway has in flight before it answers 429 with Retry-After.",
    )
    overload_target_seconds: float = Field(
        default=DEFAULT_TARGET_S,
        ge=0,
        description=(
            "Sojourn (arrival to answer) past which the gateway's requests queue: while even the"
            " shortest waits longer, the in-flight limit shrinks below LONGHAUL_MAX_IN_FLIGHT. 0: a"
            " fixed limit."
        ),
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        ge=1024,
        description="Largest request body the gateway reads, on both bindings (larger: refused, HTTP 413).",
    )
    rest_media_type: Literal["application/json", "application/a2a+json"] = Field(
        default="application/json",
        description=(
            "Content-Type of the HTTP+JSON binding's answers: application/json (what the A2A TCK"
            " checks), or application/a2a+json (what A2A 1.0.1 recommends)."
        ),
    )
    stream_keepalive_seconds: float = Field(
        default=15.0,
        gt=0,
        description="Seconds of silence after which an SSE stream sends a keep-alive comment.",
    )
    stream_max_pending: int = Field(
        default=1000,
        ge=1,
        description="Events that may wait for one slow SSE reader before its stream is closed.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines on stderr: text (for people), or json (one JSON object per line).",
    )
    audit_key_file: Path | None = Field(
        default=None,
        description=(
            "File of the Ed25519 signer key (C2SP note format) that signs the log's checkpoints; only"
            " its owner may read it. Unset: `up` makes one on first start in LONGHAUL_DATA_DIR/audit-key."
        ),
    )
    audit_verifier_keys: list[str] = Field(
        default_factory=list,
        description=(
            "Verifier keys (JSON list of C2SP verifier key strings) that checkpoints signed before a key"
            " rotation verify with, beside the current key's own."
        ),
    )

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "must start with postgresql:// (for example postgresql://postgres@127.0.0.1:5432/longhaul)"
            )
        return value or None

    @field_validator("nats_url")
    @classmethod
    def _check_nats_url(cls, value: str | None) -> str | None:
        parts = server_urls(value or "")
        if any(not part.startswith(("nats://", "tls://")) for part in parts):
            raise ValueError(
                "must start with nats:// (for example nats://127.0.0.1:4222, or several such URLs "
                "separated by commas)"
            )
        return ",".join(parts) or None

    @field_validator("nats_subject_prefix", "nats_stream")
    @classmethod
    def _check_token(cls, value: str) -> str:
        if not value or any(c in value for c in " *>\t"):
            raise ValueError("must be non-empty and contain no spaces, '*' or '>'")
        return value

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        parse_pairs(value.get_secret_value())
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _check_webhook_secret(cls, value: str | None) -> str | None:
        if value:
            secret_key(value)
        return value or None

    @field_validator("webhook_secrets")
    @classmethod
    def _check_webhook_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        for tenant, secret in value.items():
            try:
                secret_key(secret)
            except ValueError as error:
                raise ValueError(f"tenant {tenant!r}: {error}") from None
        return value

    @field_validator(
        "max_pause", "step_timeout", "retention", "nats_max_age", "webhook_retry_for", mode="before"
    )
    @classmethod
    def _seconds_as_number(cls, value: object) -> object:
        """Accept a bare number of seconds (``3600``) besides ISO 8601 (``P7D``, ``PT1H``)."""
        if isinstance(value, str):
            try:
                return timedelta(seconds=float(value))
            except ValueError:
                return value
        return value

    @field_validator("max_pause", "step_timeout", "retention", "nats_max_age", "webhook_retry_for")
    @classmethod
    def _check_positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive (seconds, or an ISO 8601 duration such as P7D)")
        return value

    @field_validator("retention_overrides")
    @classmethod
    def _check_overrides(cls, value: dict[str, timedelta]) -> dict[str, timedelta]:
        for key, retention in value.items():
            parse_key(key)
            if retention <= timedelta(0):
                raise ValueError(f"{key!r} must be positive (an ISO 8601 duration such as P90D)")
        return value


NOT_SETTINGS = frozenset({"LONGHAUL_TEST_DATABASE_URL", "LONGHAUL_TEST_NATS_URL"})
"""``LONGHAUL_*`` variables that are no settings but are read elsewhere (the test suite's servers)."""


def variable_names() -> list[str]:
    """The environment variable of every setting: ``LONGHAUL_<FIELD>``."""
    return [f"{PREFIX}{name}".upper() for name in Settings.model_fields]


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``LONGHAUL_*`` variable of ``environ`` that is no setting (a misspelling, say).

    Each names the variable and, when one is close, the setting it was probably meant to be.
    """
    known = variable_names()
    warnings = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known or upper in NOT_SETTINGS:
            continue
        # Compared without the prefix they share: it would make every name look close.
        close = difflib.get_close_matches(upper[len(PREFIX) :], [k[len(PREFIX) :] for k in known], 1, 0.75)
        hint = f" (did you mean {PREFIX}{close[0]}?)" if close else ""
        warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings
