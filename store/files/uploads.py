"""Which tenant uploaded which file: the record that lets only the uploader refer to its upload.

A client uploads a file's bytes (``POST /a2a/files``, ``api.files``) into the file store, which
keeps them by hash for everyone; this record says which tenant sent them, so that a message of
that tenant, and only of that tenant, may refer to them by their upload URL. One row per tenant
and hash (``longhaul_uploads``, migration 0012): an upload of the same bytes again refreshes its
media type, name and time. Over a store in memory the records are in memory too.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.postgres import PostgresRunQueueRecorder
from store.log.reads import read_statement

UPLOADS_TABLE = "longhaul_uploads"


@dataclass(frozen=True)
class Upload:
    """A file a tenant uploaded: its hash and size, and the media type and name it was sent with."""

    tenant: str
    sha256: str
    size: int
    media_type: str
    filename: str | None = None


class Uploads(Protocol):
    """The upload records: written once the bytes are stored, read when a message refers to them."""

    def record(self, upload: Upload, *, now: datetime) -> None:
        """Record (or refresh) ``upload``: its tenant may now refer to its hash."""
        ...

    def find(self, tenant: str, sha256: str) -> Upload | None:
        """The upload of ``sha256`` by ``tenant``, or ``None`` (none, or only another tenant's)."""
        ...


class PostgresUploads:
    """The records in ``<schema>.longhaul_uploads``."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        table = Identifier(datastore.schema, UPLOADS_TABLE)
        self._insert = SQL(
            "INSERT INTO {} (tenant, sha256, size, media_type, filename, uploaded_at)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, sha256) DO UPDATE SET"
            " media_type = excluded.media_type, filename = excluded.filename,"
            " uploaded_at = excluded.uploaded_at"
        ).format(table)
        self._select = (
            SQL("SELECT size, media_type, filename FROM {} WHERE tenant = %s AND sha256 = %s")
            .format(table)
            .as_string()
        )

    def record(self, upload: Upload, *, now: datetime) -> None:
        """Insert the row, or refresh the one of the same tenant and hash."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                self._insert,
                (upload.tenant, upload.sha256, upload.size, upload.media_type, upload.filename, now),
            )

    def find(self, tenant: str, sha256: str) -> Upload | None:
        """The row of ``tenant`` and ``sha256``, or ``None``."""
        rows = read_statement(self.datastore, self._select, (tenant, sha256))
        if not rows:
            return None
        row = rows[0]
        return Upload(tenant, sha256, int(row["size"]), str(row["media_type"]), row["filename"])


class MemoryUploads:
    """The records in this process's memory (a store in memory)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uploads: dict[tuple[str, str], Upload] = {}

    def record(self, upload: Upload, *, now: datetime) -> None:
        """Keep ``upload`` (the last one of a tenant and hash wins)."""
        with self._lock:
            self._uploads[(upload.tenant, upload.sha256)] = upload

    def find(self, tenant: str, sha256: str) -> Upload | None:
        """The upload of ``tenant`` and ``sha256``, or ``None``."""
        with self._lock:
            return self._uploads.get((tenant, sha256))


_IN_MEMORY: weakref.WeakKeyDictionary[TaskApplication, MemoryUploads] = weakref.WeakKeyDictionary()


def open_uploads(app: TaskApplication) -> Uploads:
    """The upload records beside ``app``'s log: its database's table, or (in memory) one set per store."""
    if isinstance(app.config, StoreConfig):
        recorder = app.recorder
        assert isinstance(recorder, PostgresRunQueueRecorder)
        return PostgresUploads(recorder.datastore)
    uploads = _IN_MEMORY.get(app)
    if uploads is None:
        uploads = _IN_MEMORY[app] = MemoryUploads()
    return uploads
