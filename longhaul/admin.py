"""The operator's one-shot commands on the store and its keys: migrate, projections, keys, erase."""

from __future__ import annotations

from api.api_keys import ApiKeyError, mint_key
from longhaul.errors import CommandError
from longhaul.local_services import store_for_reading
from longhaul.settings import Settings
from projections.projector import lags, rebuild_all


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
    """Destroy the secret keys of every task of ``tenant``: their sealed parts become unreadable.

    The events stay (the ciphertext with them, so every chain still verifies); a live task whose
    next step needs a destroyed secret fails, saying so.
    """
    with store_for_reading(settings, "erase") as store:
        erased = store.erase_tenant(tenant)
    print(f"erased the keys of {erased} tasks of tenant {tenant}: their secrets can no longer be read")
    return 0
