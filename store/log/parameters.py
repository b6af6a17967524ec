"""A skill's parameters: what the first message of a task gives its steps."""

from __future__ import annotations

from typing import Any

from store.secrets.secret_parts import is_secret

JSON = dict[str, Any]


def params_of(message: JSON) -> JSON:
    """Skill parameters of a first message: its first ``data`` part that is an object, else ``{}``.

    A part marked secret is never a parameter (parameters are stored in clear): a step reads it
    from ``latest_input`` instead.
    """
    for part in message.get("parts", ()):
        if isinstance(part, dict) and isinstance(part.get("data"), dict) and not is_secret(part):
            return dict(part["data"])
    return {}
