"""Versioned migrations of longhaul's own tables (the library's events and snapshots are its own).

The migrations are the ordered files ``NNNN_<name>.sql`` beside this module, each a template
with ``{schema}`` standing for the schema (filled in with ``psycopg.sql``, so it is quoted as an
identifier). ``<schema>.longhaul_schema_version`` holds one row per applied migration; the
schema's version is the highest. ``migrate`` applies what is pending, each migration in its own
transaction together with its version row, and refuses a schema newer than this release knows.
Versions only increase but may skip a number (a migration taken by a branch not merged yet):
what is pending is every known migration not recorded as applied, in order, so a migration
merged later with a lower number than one already applied is still applied.

The caller holds the schema's DDL advisory lock (``store.log.locks.ddl_lock_name``) on the
connection it passes, so processes starting together apply each migration once. Files are never
edited once released: a change is a new file. Versions 1 and 2 use ``IF NOT EXISTS`` because they
adopt the tables that releases before versioned migrations created (version 0).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

VERSION_TABLE = "longhaul_schema_version"
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class SchemaTooNewError(RuntimeError):
    """The schema was migrated by a newer release than this one: refuse to touch it."""


@dataclass(frozen=True)
class Migration:
    """One versioned change of the schema."""

    version: int
    name: str
    template: str

    @property
    def label(self) -> str:
        """``0001_run_queue``: the file name without ``.sql``."""
        return f"{self.version:04d}_{self.name}"

    def statement(self, schema: str) -> sql.Composed:
        """The migration's SQL for ``schema``."""
        return sql.SQL(self.template).format(schema=sql.Identifier(schema))


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate`` found and did."""

    schema: str
    found: int
    """The schema's version before: 0 for a schema without a version table."""
    applied: tuple[Migration, ...]

    @property
    def version(self) -> int:
        """The schema's version now (the highest applied: one merged late may be lower)."""
        return max([self.found, *(m.version for m in self.applied)])


@cache
def known() -> tuple[Migration, ...]:
    """Every migration of this release, in order (increasing versions from 1, each once)."""
    found = []
    for entry in resources.files(__package__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if not versions or versions[0] != 1 or len(set(versions)) != len(versions):
        raise RuntimeError(f"schema migrations must be numbered from 1, each number once; found {versions}")
    return tuple(found)


def latest_version() -> int:
    """The newest schema version this release knows."""
    return known()[-1].version


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version of ``schema``: the highest applied migration, 0 if none was (or no schema)."""
    cursor = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_tables WHERE schemaname = %s AND tablename = %s)",
        (schema, VERSION_TABLE),
    )
    row = cursor.fetchone()
    if not (row and row[0]):
        return 0
    cursor = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(sql.Identifier(schema, VERSION_TABLE))
    )
    row = cursor.fetchone()
    return int(row[0]) if row else 0


def applied_versions(conn: psycopg.Connection[Any], schema: str) -> set[int]:
    """The versions recorded as applied to ``schema`` (none for a schema without a version table)."""
    if schema_version(conn, schema) == 0:
        return set()
    cursor = conn.execute(sql.SQL("SELECT version FROM {}").format(sql.Identifier(schema, VERSION_TABLE)))
    return {int(row[0]) for row in cursor.fetchall()}


def refuse_newer(conn: psycopg.Connection[Any], schema: str) -> int:
    """Raise ``SchemaTooNewError`` if ``schema`` is newer than this release; else its version."""
    found = schema_version(conn, schema)
    latest = latest_version()
    if found > latest:
        raise SchemaTooNewError(
            f"schema {schema!r} is at version {found}, but this release of longhaul knows versions "
            f"up to {latest} only: a newer release migrated it. Run that release (or a newer one) "
            "against this schema; to go back to this release, restore the backup taken before "
            "the upgrade. Nothing was changed."
        )
    return found


def create_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create ``schema`` if it is missing (the library expects it to exist)."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def migrate(conn: psycopg.Connection[Any], schema: str) -> MigrationReport:
    """Create ``schema`` if missing and apply every pending migration, in order.

    ``conn`` is an autocommit connection holding the schema's DDL advisory lock. Raises
    ``SchemaTooNewError`` (changing nothing) if the schema is newer than this release.
    """
    found = refuse_newer(conn, schema)
    applied = applied_versions(conn, schema)
    pending = [m for m in known() if m.version not in applied]
    if not pending:
        return MigrationReport(schema=schema, found=found, applied=())
    version_table = sql.Identifier(schema, VERSION_TABLE)
    with conn.transaction():
        create_schema(conn, schema)
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version int PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(version_table)
        )
    for migration in pending:
        with conn.transaction():
            conn.execute(migration.statement(schema))
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(version_table),
                (migration.version, migration.name),
            )
        log.info("schema %s: applied migration %s", schema, migration.label)
    return MigrationReport(schema=schema, found=found, applied=tuple(pending))
