"""Standard Webhooks signatures (https://www.standardwebhooks.com): what a receiver verifies.

Every delivery carries ``webhook-id`` (the delivery's id: the same on every retry, so a receiver
can drop a duplicate), ``webhook-timestamp`` (Unix seconds of this attempt) and
``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` keyed with the
tenant's secret. A secret is ``whsec_`` followed by base64 bytes; the ``standardwebhooks``
package (and its ports to other languages) verifies these headers.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

SECRET_PREFIX = "whsec_"  # noqa: S105 - the scheme's prefix, not a secret
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh random secret: ``whsec_`` + 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of ``secret`` (``whsec_<base64>``); ``ValueError`` for anything else."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret starts with {SECRET_PREFIX} (then base64)")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"a webhook secret is {SECRET_PREFIX} followed by base64") from None
    if len(key) < 16:
        raise ValueError("a webhook secret needs at least 16 bytes (24 base64 characters)")
    return key


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.digest(key, signed, "sha256")).decode()


@dataclass(frozen=True)
class WebhookSigner:
    """Signs deliveries with the tenant's secret, else the default one.

    The secrets are checked and decoded once, here, not on every attempt.
    """

    default: str
    per_tenant: Mapping[str, str] = field(default_factory=dict)
    _default_key: bytes = field(init=False, repr=False, compare=False)
    _keys: dict[str, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_default_key", secret_key(self.default))
        object.__setattr__(self, "_keys", {t: secret_key(s) for t, s in self.per_tenant.items()})

    def headers(self, webhook_id: str, tenant: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three Standard Webhooks headers for one attempt."""
        key = self._keys.get(tenant, self._default_key)
        return {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(key, webhook_id, timestamp, body),
        }
