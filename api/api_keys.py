"""API keys: the bearer tokens callers present, the tenants they map to, and the key file.

Two sources, both read once at start: ``LONGHAUL_API_KEYS`` holds ``tenant=key`` pairs in the
clear (development and tests), and the key file (``LONGHAUL_API_KEY_FILE``, production) holds
one key per line as its SHA-256 digest only, with a name that logs can use::

    # name       tenant   digest of the key
    9f86d081     acme     sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

A key's *id* is the first 8 hex digits of its digest (``key_id_of``): the same whichever source
the key comes from, readable off a key file line, and recorded in the events a client's calls
append (ADR 0027). ``mint_key`` names a new key by its id.

A plain SHA-256 is enough for these keys because ``mint_key`` makes them with 256 random bits:
nothing is gained by guessing, so a slow password hash would only slow every request down
(ADR 0019). A presented key is hashed and compared with every known digest by
``hmac.compare_digest``, so the time an answer takes says nothing about how close a guess was.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass

KEY_PREFIX = "lh_"
"""Every minted key starts with this (a scanner for leaked secrets can look for it)."""

DIGEST_SCHEME = "sha256:"
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
KEY_ID_HEX_DIGITS = 8
"""How many hex digits of a key's SHA-256 make its id (32 bits: ids of one ring are checked unique)."""
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DIGEST_HEX = re.compile(r"[0-9a-f]{64}")
MIN_KEY_LENGTH = 16
"""The shortest key ``LONGHAUL_API_KEYS`` accepts (minted keys are 46 characters)."""

TENANT_RULE = "a tenant is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"

CALLER_KEY_ID: ContextVar[str | None] = ContextVar("longhaul_caller_key_id", default=None)
"""The key id of the request being served: set by ``api.authentication.Authenticate`` for the
request's handlers, read by ``api.service`` to record it in the events a client's call appends
(``None`` on an open gateway). A context variable because a request's handlers run in its context
(``asyncio.to_thread`` copies it), while the bindings' wire models must not carry it (ADR 0027)."""


class ApiKeyError(ValueError):
    """A key setting or key file line that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class ApiKey:
    """One accepted key: its name (safe to log), its tenant and the SHA-256 digest of the key."""

    name: str
    tenant: str
    digest: bytes

    @property
    def key_id(self) -> str:
        """The key's id: the first 8 hex digits of its digest (``key_id_of``)."""
        return key_id_of(self.digest)


@dataclass(frozen=True)
class MintedKey:
    """A new key and the key file line that accepts it (the line holds only the digest)."""

    key: str
    line: str

    @property
    def key_id(self) -> str:
        """The new key's id (``key_id_of`` its digest), the first field of its line."""
        return key_id_of(digest_of(self.key))


def digest_of(key: str) -> bytes:
    """The SHA-256 digest of a key as presented (UTF-8)."""
    return hashlib.sha256(key.encode()).digest()


def key_id_of(digest: bytes) -> str:
    """The id of the key whose SHA-256 digest is ``digest``: its first 8 hex digits.

    Safe to show and to record: 32 bits of a digest say nothing usable about a 256-bit key.
    """
    return digest.hex()[:KEY_ID_HEX_DIGITS]


def mint_key(tenant: str) -> MintedKey:
    """A new random key for ``tenant`` (256 bits) and its key file line, named by the key's id."""
    _check_tenant(tenant, where="tenant")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = digest_of(key)
    return MintedKey(key=key, line=f"{key_id_of(digest)} {tenant} {DIGEST_SCHEME}{digest.hex()}")


class KeyRing:
    """The keys a gateway accepts, looked up by the key a caller presents."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self.keys = tuple(keys)
        if not self.keys:
            raise ApiKeyError("no API keys: configure at least one, or none at all for the open dev tenant")
        names: set[str] = set()
        digests: set[bytes] = set()
        ids: set[str] = set()
        for key in self.keys:
            if key.name in names:
                raise ApiKeyError(f"key name {key.name!r} appears twice")
            if key.digest in digests:
                raise ApiKeyError(f"key {key.name!r} is the same key as another one")
            if key.key_id in ids:
                raise ApiKeyError(
                    f"key {key.name!r} has the same key id {key.key_id} as another key: the events could"
                    " not tell their callers apart; mint another key (`longhaul keys new TENANT`)"
                )
            names.add(key.name)
            digests.add(key.digest)
            ids.add(key.key_id)

    @property
    def tenants(self) -> frozenset[str]:
        """Every tenant some key maps to."""
        return frozenset(key.tenant for key in self.keys)

    def find(self, presented: str) -> ApiKey | None:
        """The key ``presented`` is, or None; every digest is compared, in constant time each."""
        digest = digest_of(presented)
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        return found


def parse_pairs(text: str) -> list[ApiKey]:
    """The keys of ``LONGHAUL_API_KEYS``: ``tenant=key`` pairs separated by commas.

    The key names are ``env-1``, ``env-2``... in the order given. Blank entries are skipped.
    """
    keys = []
    entries = [entry.strip() for entry in text.split(",")]
    for position, entry in enumerate((e for e in entries if e), start=1):
        tenant, equals, key = (part.strip() for part in entry.partition("="))
        where = f"pair {position}"
        if not equals:
            raise ApiKeyError(f"{where} has no '=': write tenant=key")
        _check_tenant(tenant, where=where)
        if len(key) < MIN_KEY_LENGTH or any(c.isspace() for c in key):
            raise ApiKeyError(
                f"{where} (tenant {tenant!r}): the key must be at least {MIN_KEY_LENGTH} characters"
                " without spaces (`longhaul keys new TENANT` makes one)"
            )
        keys.append(ApiKey(name=f"env-{position}", tenant=tenant, digest=digest_of(key)))
    return keys


def parse_key_file(text: str) -> list[ApiKey]:
    """The keys of a key file: ``NAME TENANT sha256:HEX`` per line; ``#`` comments, blank lines.

    Raises:
        ApiKeyError: A line that is not such a line, naming its number (the key file's secrets
            never appear in the message: the line holds none).
    """
    keys = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"line {number}"
        fields = line.split()
        if len(fields) != 3:
            raise ApiKeyError(f"{where}: expected 3 fields 'NAME TENANT sha256:HEX', found {len(fields)}")
        name, tenant, digest = fields
        if not KEY_NAME.fullmatch(name):
            raise ApiKeyError(f"{where}: key name {name!r}: 1-64 letters, digits, '.', '_' or '-'")
        _check_tenant(tenant, where=where)
        hex_digest = digest.removeprefix(DIGEST_SCHEME)
        if not digest.startswith(DIGEST_SCHEME) or not DIGEST_HEX.fullmatch(hex_digest):
            raise ApiKeyError(
                f"{where}: the digest must be sha256: and 64 lower-case hex digits"
                " (a key itself never goes in the file; `longhaul keys new TENANT` prints the line)"
            )
        keys.append(ApiKey(name=name, tenant=tenant, digest=bytes.fromhex(hex_digest)))
    return keys


def _check_tenant(tenant: str, *, where: str) -> None:
    if not TENANT_NAME.fullmatch(tenant):
        raise ApiKeyError(f"{where}: tenant {tenant!r}: {TENANT_RULE}")
