"""Each task's secret key, kept outside the event log, and the AES-256-GCM that uses it.

A task gets a key the first time a client sends it a secret (``store.secrets.secret_parts``): a row of
``longhaul_task_keys`` (migration 0007) written in the same transaction as the event that holds
the first ciphertext, and deleted in the same transaction as the event that ends the task (or by
``longhaul erase``). The log keeps only ciphertext: once the row is gone, nobody can read it,
wherever the bytes were copied (archives, backups, NATS). See ADR 0024.

Each sealed value is encrypted with a fresh 96-bit nonce; its associated data binds it to the
task, the version of the event that carries it and its place in that event's message, so a
ciphertext moved to another task, event or part does not decrypt.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import IntegrityError
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from store.log.reads import read_statement, read_transaction

JSON = dict[str, Any]

TASK_KEYS_TABLE = "longhaul_task_keys"
KEY_BYTES = 32
NONCE_BYTES = 12
ALGORITHM = "A256GCM"
AD_PREFIX = b"longhaul-secret-v1\n"
"""Associated data: this, the task id (16 bytes), the version (8 bytes BE), the part index (4 bytes BE)."""


class SecretUnreadableError(Exception):
    """A sealed value cannot be read: its task's key is gone, or the stored value was altered."""


@dataclass(frozen=True)
class TaskKey:
    """One task's AES-256 key; ``key_id`` (random, not derived from the key) names it in envelopes."""

    task_id: UUID
    tenant: str
    key_id: str
    key: bytes = field(repr=False)

    @classmethod
    def new(cls, task_id: UUID, tenant: str) -> TaskKey:
        """A fresh random key for ``task_id``."""
        return cls(task_id=task_id, tenant=tenant, key_id=os.urandom(8).hex(), key=AESGCM.generate_key(256))


def associated_data(task_id: UUID, version: int, index: int) -> bytes:
    """What a ciphertext is bound to: its task, its event's version and its part index."""
    return AD_PREFIX + task_id.bytes + version.to_bytes(8, "big") + index.to_bytes(4, "big")


def seal(key: TaskKey, plaintext: bytes, *, version: int, index: int) -> JSON:
    """The envelope of ``plaintext`` (JSON-ready): algorithm, key id, version, nonce, ciphertext."""
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(key.key).encrypt(nonce, plaintext, associated_data(key.task_id, version, index))
    return {
        "alg": ALGORITHM,
        "kid": key.key_id,
        "version": version,
        "nonce": _b64(nonce),
        "ciphertext": _b64(ciphertext),
    }


def unseal(key: TaskKey | None, envelope: JSON, *, task_id: UUID, index: int) -> bytes:
    """The plaintext of ``envelope``, sealed for ``task_id`` at part ``index``.

    Raises:
        SecretUnreadableError: No key (destroyed: the task ended, or ``longhaul erase``), another
            key than the one it was sealed with, or a ciphertext, nonce, version or place that
            was altered (AES-GCM refuses it).
    """
    kid = envelope.get("kid")
    if key is None or key.key_id != kid:
        raise SecretUnreadableError(
            f"task {task_id}: its secret (key {kid}) cannot be read: the task's key was destroyed "
            "(the task ended, or its tenant was erased with `longhaul erase`)"
        )
    try:
        if envelope.get("alg") != ALGORITHM:
            raise ValueError(f"unknown algorithm {envelope.get('alg')!r}")
        nonce, ciphertext = _unb64(envelope["nonce"]), _unb64(envelope["ciphertext"])
        version = envelope["version"]
        if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < 2**63:
            raise ValueError(f"bad version {version!r}")
        return AESGCM(key.key).decrypt(nonce, ciphertext, associated_data(task_id, version, index))
    except (InvalidTag, KeyError, TypeError, ValueError) as error:
        raise SecretUnreadableError(
            f"task {task_id}: a secret does not decrypt under the task's key (key {kid}): "
            f"the stored ciphertext, or the task, version or part it is bound to, was altered ({error!r})"
        ) from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise TypeError("not base64 text")
    return base64.b64decode(text.encode("ascii"), validate=True)


class TaskKeys(Protocol):
    """Where the keys are: the reads and the erasure (writes happen inside the append transaction)."""

    def get(self, task_id: UUID) -> TaskKey | None:
        """The task's key, or ``None`` (it never had one, or it was destroyed)."""
        ...

    def erase_tenant(self, tenant: str) -> int:
        """Destroy the keys of every task of ``tenant``; returns how many there were."""
        ...

    def count(self) -> int:
        """How many keys exist (tasks holding readable secrets)."""
        ...


@dataclass(frozen=True)
class KeyChanges:
    """The key rows one append writes: new keys, and the tasks whose keys it destroys."""

    new: Sequence[TaskKey] = ()
    destroyed: Sequence[UUID] = ()

    @classmethod
    def of(cls, kwargs: dict[str, Any]) -> KeyChanges:
        """The changes an append's keyword arguments carry (``task_keys``, ``task_keys_destroyed``)."""
        return cls(new=kwargs.get("task_keys", ()), destroyed=kwargs.get("task_keys_destroyed", ()))


class PostgresTaskKeys:
    """The keys in ``<schema>.longhaul_task_keys``.

    Written by the append itself (``longhaul_append``, migration 0009): a new key is a unique
    violation when the task has one, which aborts the append like a lost race (the writer
    reloads, finds the key that won, and seals with it).
    """

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        table = Identifier(datastore.schema, TASK_KEYS_TABLE)
        self._select = (
            SQL("SELECT task_id, tenant, key_id, key FROM {} WHERE task_id = %s").format(table).as_string()
        )
        self._erase = SQL("DELETE FROM {} WHERE tenant = %s").format(table)
        self._count = SQL("SELECT count(*) AS n FROM {}").format(table)

    def get(self, task_id: UUID) -> TaskKey | None:
        """The task's key, or ``None``."""
        rows = read_statement(self.datastore, self._select, (task_id,))
        if not rows:
            return None
        row = rows[0]
        return TaskKey(
            task_id=row["task_id"], tenant=row["tenant"], key_id=row["key_id"], key=bytes(row["key"])
        )

    def erase_tenant(self, tenant: str) -> int:
        """Delete every key of ``tenant``'s tasks, in one transaction."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._erase, (tenant,))
            return curs.rowcount

    def count(self) -> int:
        """How many keys exist."""
        with read_transaction(self.datastore) as curs:
            curs.execute(self._count)
            rows = curs.fetchall()
        return int(rows[0]["n"]) if rows else 0


class MemoryTaskKeys:
    """The keys in this process's memory, changed under the memory recorder's database lock."""

    def __init__(self, lock: threading.Lock | threading.RLock) -> None:
        self._lock = lock
        self._keys: dict[UUID, TaskKey] = {}

    def check(self, changes: KeyChanges) -> None:
        """Refuse (like the table's primary key) a new key for a task that has one; under the lock.

        The library's ``IntegrityError`` is a lost race to the application: the writer reloads.
        """
        for key in changes.new:
            if key.task_id in self._keys:
                raise IntegrityError(f"task {key.task_id} already has a key")

    def write(self, changes: KeyChanges) -> None:
        """Apply ``changes``; the caller holds the lock, after the append's checks passed."""
        for key in changes.new:
            self._keys[key.task_id] = key
        for task_id in changes.destroyed:
            self._keys.pop(task_id, None)

    def get(self, task_id: UUID) -> TaskKey | None:
        """The task's key, or ``None``."""
        with self._lock:
            return self._keys.get(task_id)

    def erase_tenant(self, tenant: str) -> int:
        """Forget every key of ``tenant``'s tasks."""
        with self._lock:
            doomed = [task_id for task_id, key in self._keys.items() if key.tenant == tenant]
            for task_id in doomed:
                del self._keys[task_id]
            return len(doomed)

    def count(self) -> int:
        """How many keys exist."""
        with self._lock:
            return len(self._keys)
