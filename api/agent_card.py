"""The A2A 1.0 agent card served at ``/.well-known/agent-card.json``.

The card is built once per process from the skill registry, so its ETag and Last-Modified are
fixed for the life of the process and clients can revalidate it cheaply.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from domain.skill import Skill, SkillRegistry

JSON = dict[str, Any]

JSONRPC_PATH = "/a2a/jsonrpc"
MEDIA_MODES = ["text/plain", "application/json"]
CACHE_CONTROL = "public, max-age=300"


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


def build_agent_card(registry: SkillRegistry, public_url: str, *, streaming: bool = False) -> JSON:
    """The card: our JSON-RPC interface, capabilities and the newest version of every skill.

    ``streaming``: whether the gateway has the task feed its streams need (``api.streams``).
    """
    newest: dict[str, Skill] = {}
    for skill in registry.all():  # sorted by name, then version: the last one per name wins
        newest[skill.name] = skill
    return {
        "name": "longhaul",
        "description": (
            "Durable runtime for long-running A2A tasks: every step is committed to an append-only "
            "log, so tasks survive restarts and pauses of several days."
        ),
        "version": _package_version(),
        "supportedInterfaces": [
            {
                "url": public_url.rstrip("/") + JSONRPC_PATH,
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            }
        ],
        "capabilities": {"streaming": streaming, "pushNotifications": True},
        "defaultInputModes": list(MEDIA_MODES),
        "defaultOutputModes": list(MEDIA_MODES),
        "skills": [_skill_entry(skill) for skill in newest.values()],
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


def _package_version() -> str:
    try:
        return version("longhaul")
    except PackageNotFoundError:
        return "0.0.0"
