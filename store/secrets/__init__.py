"""Secrets: parts a client marks secret, sealed under a key per task kept outside the log.

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use: the store's packages import each other's modules, so an eager face would
import in a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.secrets.secret_parts import REDACTED_PART as REDACTED_PART
    from store.secrets.secret_parts import SECRET_EXTENSION as SECRET_EXTENSION
    from store.secrets.secret_parts import holds_sealed as holds_sealed
    from store.secrets.secret_parts import seal_message as seal_message
    from store.secrets.task_keys import SecretUnreadableError as SecretUnreadableError
    from store.secrets.task_keys import TaskKey as TaskKey

_HOMES = {
    "REDACTED_PART": "store.secrets.secret_parts",
    "SECRET_EXTENSION": "store.secrets.secret_parts",
    "SecretUnreadableError": "store.secrets.task_keys",
    "TaskKey": "store.secrets.task_keys",
    "holds_sealed": "store.secrets.secret_parts",
    "seal_message": "store.secrets.secret_parts",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
