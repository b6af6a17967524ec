"""The operator's one-shot commands on the store and its keys: migrate, projections, keys, erase."""

from __future__ import annotations

import sys

from api.api_keys import ApiKeyError, mint_key
from longhaul import wiring
from longhaul.errors import CommandError
from longhaul.local_services import store_for_reading
from longhaul.settings import Settings
from projections.projector import lags, rebuild_all
from store.evidence import BlockingFiles, FileRetention, sweep_files


def migrate(settings: Settings) -> int:
    """Apply pending schema migrations (opening the store does) and print what was applied."""
    with store_for_reading(settings, "migrate") as store:
        report = store.schema_migrations
    assert report is not None
    for migration in report.applied:
        print(f"applied {migration.label}")
    if report.applied:
        print(f"schema {report.schema}: migrated from version {report.found} to {report.version}")
    else:
        print(f"schema {report.schema}: at version {report.version}, nothing to apply")
    return 0


def projections(settings: Settings, action: str) -> int:
    """``rebuild`` the projections from the log, or print their ``status`` (position and lag)."""
    with store_for_reading(settings, f"projections {action}") as store:
        if action == "rebuild":
            for label, rebuilt in rebuild_all(store):
                print(f"{label}: rebuilt {rebuilt.tasks} tasks up to log position {rebuilt.position}")
        found = lags(store)
    for kept, lag in found:
        print(f"{kept.label}: at log position {lag.position} of {lag.log_position} ({lag.behind} behind)")
    return 0


def keys_new(tenant: str) -> int:
    """Mint an API key for ``tenant``: the key for the client, then the key file line for the server."""
    try:
        minted = mint_key(tenant)
    except ApiKeyError as error:
        raise CommandError(str(error)) from None
    print(f"key (give it to the client; it is not stored anywhere): {minted.key}")
    print(f"key id (recorded in the events of its calls; longhaul history shows it): {minted.key_id}")
    print(f"key file line (append it to LONGHAUL_API_KEY_FILE, then restart the gateways): {minted.line}")
    return 0


def erase(settings: Settings, tenant: str) -> int:
    """Destroy the secret keys of every task of ``tenant`` and delete the stored files of its tasks.

    The sealed parts become unreadable. The tasks are recorded as erased, and the files their
    events (and the tenant's uploads) refer to are deleted from the file store unless a task of
    another tenant holds them. The events stay (the ciphertext and the files' hashes with them,
    so every chain still verifies); a live task whose next step needs a destroyed secret or file
    fails, saying so. 1 if some files could not be looked at yet (no projector keeps the file
    index up with the log): run it again once one runs.
    """
    clock = wiring.system_clock(settings)
    with (
        store_for_reading(settings, "erase") as store,
        BlockingFiles(lambda: wiring.file_store(settings)) as files,
    ):
        erased = store.erase_tenant(tenant)
        let_go = FileRetention(store).erase_tenant_files(tenant, now=clock())
        sweep = sweep_files(store, files, now=clock()) if let_go.files else None
    print(f"erased the keys of {erased} tasks of tenant {tenant}: their secrets can no longer be read")
    if sweep is None:
        return 0
    print(
        f"its tasks refer to {let_go.files} stored files: deleted {sweep.deleted} nothing else holds,"
        f" {sweep.held} still held by other tenants' tasks or archives"
    )
    if sweep.waiting:
        print(
            f"longhaul: {sweep.waiting} stored files wait to be deleted: the file index trails the log"
            " (run a projector, then erase again)",
            file=sys.stderr,
        )
        return 1
    return 0
