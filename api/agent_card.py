"""The A2A 1.0 agent card served at ``/.well-known/agent-card.json``.

The card is built once per process from the skill registry and the durability policy, so its
ETag and Last-Modified are fixed for the life of the process and clients can revalidate it cheaply.

longhaul's durability policy is a declared A2A extension in ``capabilities.extensions`` (URI
``DURABILITY_EXTENSION``, ``required: false``): what a caller may rely on about retention, restarts,
pauses, resends and stream resumption, with the figures this deployment runs with. No request
needs to activate it; it describes, it changes nothing on the wire. A second extension
(``SECRET_EXTENSION``) declares the part metadata key that marks a part secret; a third
(``FILES_EXTENSION``, on a gateway with a file store) says files are kept and served by
reference: where they are downloaded and uploaded, and the limits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import TypeAdapter

from domain.skill import Skill, SkillRegistry
from store.public_form import FILES_PATH, UPLOADS
from store.secrets import REDACTED_PART, SECRET_EXTENSION

JSON = dict[str, Any]

JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
MEDIA_MODES = ["text/plain", "application/json"]
CACHE_CONTROL = "public, max-age=300"
DURABILITY_EXTENSION = "urn:longhaul:a2a:durability:v1"
"""The URI of longhaul's durability policy extension (docs/api.md#the-durability-extension)."""
FILES_EXTENSION = "urn:longhaul:a2a:files:v1"
"""The URI of the extension that says files are served by reference (docs/api.md#files)."""

_DURATION = TypeAdapter(timedelta)


@dataclass(frozen=True)
class DurabilityPolicy:
    """The figures of the durability extension: from the settings the deployment runs with.

    ``retention`` is ``LONGHAUL_RETENTION`` (the default; ``LONGHAUL_RETENTION_OVERRIDES`` may set
    others per tenant or skill, which the public card does not list), ``max_pause`` is
    ``LONGHAUL_MAX_PAUSE``, ``streaming`` whether SSE streams (and so their resumption) are served.
    """

    retention: timedelta
    max_pause: timedelta
    retention_overridden: bool = False
    streaming: bool = False


@dataclass(frozen=True)
class CardDocument:
    """The card's bytes and the validators sent with them."""

    body: bytes
    etag: str
    last_modified: str

    def matches(self, if_none_match: str | None) -> bool:
        """Whether an ``If-None-Match`` header names this version of the card."""
        if not if_none_match:
            return False
        tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
        return "*" in tags or self.etag in tags


@dataclass(frozen=True)
class FilesPolicy:
    """The figures of the files extension: the largest upload, and whether answers give pre-signed URLs."""

    max_upload_bytes: int
    pre_signed: bool = False
    url_expiry: timedelta = timedelta(minutes=15)


BEARER_SCHEME = "bearer"
"""The name of the bearer API key scheme in the card's ``securitySchemes``."""


def build_agent_card(
    registry: SkillRegistry,
    public_url: str,
    policy: DurabilityPolicy,
    *,
    bearer: bool = False,
    files: FilesPolicy | None = None,
) -> JSON:
    """The card: our interfaces, capabilities (with the durability extension) and skills.

    ``skills`` lists the newest version of every skill (the one new tasks start on); the
    extension lists every version this release runs, for tasks pinned to an older one.
    ``bearer``: every method needs an API key as a bearer token, and the card says so in
    ``securitySchemes`` and ``securityRequirements`` (without it, the open dev tenant, neither).
    With ``files`` (a file store) the card declares the files extension.
    """
    newest: dict[str, Skill] = {}
    for skill in registry.all():  # sorted by name, then version: the last one per name wins
        newest[skill.name] = skill
    base = public_url.rstrip("/")
    card: JSON = {
        "name": "longhaul",
        "description": (
            "Durable runtime for long-running A2A tasks: every step is committed to an append-only "
            "log, so tasks survive restarts and pauses of several days."
        ),
        "version": package_version(),
        "supportedInterfaces": [
            {"url": base + JSONRPC_PATH, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": base + REST_PATH, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "capabilities": {
            "streaming": policy.streaming,
            "pushNotifications": True,
            "extendedAgentCard": False,
            "extensions": [
                durability_extension(registry, policy),
                secret_parts_extension(),
                *([files_extension(base, files)] if files is not None else []),
            ],
        },
        "defaultInputModes": list(MEDIA_MODES),
        "defaultOutputModes": list(MEDIA_MODES),
        "skills": [_skill_entry(skill) for skill in newest.values()],
    }
    if bearer:
        card["securitySchemes"] = {
            BEARER_SCHEME: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "API key",
                    "description": "A longhaul API key; it names the caller's tenant.",
                }
            }
        }
        card["securityRequirements"] = [{"schemes": {BEARER_SCHEME: {"list": []}}}]
    return card


def secret_parts_extension() -> JSON:
    """The ``AgentExtension`` that declares how a client marks a part secret (docs/api.md, Secrets)."""
    return {
        "uri": SECRET_EXTENSION,
        "description": (
            "Secret parts: a message part whose metadata holds this URI (as a key, value true) is a "
            "secret, and so is every part of an answer to a task in TASK_STATE_AUTH_REQUIRED. "
            "longhaul stores them encrypted under a key for the task, held outside the event log; "
            "only the task's running step reads them. Everywhere a message is shown (GetTask, "
            'streams, push notifications) such a part is {"data": {"redacted": true}, '
            '"metadata": {"<this URI>": {"redacted": true}}}. The key is destroyed when the '
            "task ends, or when its tenant is erased."
        ),
        "required": False,
        "params": {"marker": "part metadata key", "redactedPart": REDACTED_PART},
    }


def files_extension(base: str, policy: FilesPolicy) -> JSON:
    """The ``AgentExtension`` that says files are kept and served by reference (docs/api.md, Files)."""
    params: JSON = {
        "download": base + FILES_PATH + "/{taskId}/{sha256}",
        "upload": base + FILES_PATH,
        "uploadedUrl": base + FILES_PATH + "/" + UPLOADS + "/{sha256}",
        "maxUploadBytes": policy.max_upload_bytes,
        "rangeRequests": True,
        "preSigned": policy.pre_signed,
    }
    if policy.pre_signed:
        params["preSignedExpirySeconds"] = policy.url_expiry.total_seconds()
    return {
        "uri": FILES_EXTENSION,
        "description": (
            "Files by reference: a file part of a task (an artifact, a message) is a URL, never its "
            "bytes; each file part's metadata holds its sha256 and size. The URL is the gateway's "
            "`download` (the same API key and tenant as every method; ETag is the SHA-256; Range "
            "requests resume a download) or, with `preSigned`, a URL of the object store valid "
            "for `preSignedExpirySeconds` (read the task again for a fresh one). A client uploads a "
            "file with one POST of its bytes to `upload` (at most `maxUploadBytes`; the request's "
            "Content-Type is its media type, a `filename` query parameter its name) and puts the "
            "URL it answers in a message's file part."
        ),
        "required": False,
        "params": params,
    }


def durability_extension(registry: SkillRegistry, policy: DurabilityPolicy) -> JSON:
    """The ``AgentExtension`` that declares longhaul's durability policy (docs/api.md)."""
    versions: dict[str, list[int]] = {}
    for skill in registry.all():
        versions.setdefault(skill.name, []).append(skill.version)
    return {
        "uri": DURABILITY_EXTENSION,
        "description": (
            "Durability policy: tasks survive restarts and resume from their last committed step; "
            "terminal tasks are kept for `retention`, then answer TaskNotFound saying they expired; "
            "a pause (input-required, auth-required) ends at its deadline, at most `maxPause`; a "
            "SendMessage resent with the same messageId returns the original result; with "
            "`streamResume`, every SSE frame's id is the task version and Last-Event-ID resumes "
            "after it without a gap."
        ),
        "required": False,
        "params": {
            "retention": _DURATION.dump_python(policy.retention, mode="json"),
            "retentionSeconds": policy.retention.total_seconds(),
            "retentionOverridden": policy.retention_overridden,
            "maxPause": _DURATION.dump_python(policy.max_pause, mode="json"),
            "maxPauseSeconds": policy.max_pause.total_seconds(),
            "onRestart": "resume",
            "sideEffects": "once",
            "resendByMessageId": True,
            "streamResume": policy.streaming,
            "skillVersions": versions,
        },
    }


def card_document(card: JSON, *, modified: datetime) -> CardDocument:
    """Serialise ``card`` once, with a content-derived ETag."""
    body = json.dumps(card, separators=(",", ":"), ensure_ascii=False).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    moment = modified.astimezone(UTC).replace(microsecond=0)
    return CardDocument(body=body, etag=etag, last_modified=format_datetime(moment, usegmt=True))


def _skill_entry(skill: Skill) -> JSON:
    return {
        "id": skill.name,
        "name": skill.name,
        "description": skill.description or f"The {skill.name} skill (version {skill.version}).",
        "tags": list(skill.tags),
    }


def package_version() -> str:
    """The installed ``longhaul`` package's version."""
    try:
        return version("longhaul")
    except PackageNotFoundError:
        return "0.0.0"
