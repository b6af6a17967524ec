"""The commands on the log's evidence: ``verify`` (the store, or an archive file) and ``archive``.

They parse nothing and decide nothing: the checks are ``store.evidence.verify_store`` and
``verify_archive``, the archive run is ``store.evidence.archive``; here they are called and printed.
Faults go to stdout as they are found, progress to stderr.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from longhaul import wiring
from longhaul.errors import CommandError
from longhaul.local_services import store_for_reading
from longhaul.settings import Settings
from store.evidence import (
    ArchiveError,
    ChainReport,
    LogReport,
    NoVerifierKeyError,
    Verification,
    archive_expired,
    archive_histories,
    verify_archive,
    verify_store,
)
from store.log import PostgresRunQueueRecorder

VERIFY_PROGRESS_S = 2.0
"""``verify`` reports progress on stderr at most this often (a store checked in less says nothing)."""
NO_VERIFIER_KEY = (
    "no verifier key to check the signed checkpoints with: set LONGHAUL_AUDIT_KEY_FILE"
    " (the signer key's file) or LONGHAUL_AUDIT_VERIFIER_KEYS"
)


def archive(settings: Settings, directory: Path) -> int:
    """Archive every expired task to one verified file in ``directory``, then purge them.

    1 if a task was refused for a fault in its chain (named on stderr), else 0.
    """
    with store_for_reading(settings, "archive") as store:
        try:
            run = archive_expired(store, directory, clock=wiring.system_clock(settings))
        except ArchiveError as error:
            raise CommandError(str(error)) from error
    left = (
        f"; {len(run.unsequenced)} not yet in a signed checkpoint and stay" if run.unsequenced else ""
    ) + (f"; {len(run.refused)} refused for faults (named above), not archived" if run.refused else "")
    for faults in run.refused.values():
        for fault in faults:
            print(f"refused: {fault}", file=sys.stderr)
    if run.path is None:
        print(("nothing archived" + left) if left else "no expired tasks: nothing archived")
        return 1 if run.refused else 0
    print(run.path)
    print(
        f"archived {run.tasks} tasks ({run.events} events), verified; purged {len(run.purged)}"
        + (f"; {len(run.skipped)} changed meanwhile and stay" if run.skipped else "")
        + left,
        file=sys.stderr,
    )
    return 1 if run.refused else 0


def verify(settings: Settings, archive: Path | None = None) -> int:
    """Check every chain and the Merkle log against the signed checkpoints; 1 if any fault, else 0.

    With ``archive``: the file's chains and (format version 3) receipts instead.
    """
    if archive is not None:
        return _verify_archive(settings, archive)
    where = f"schema {settings.database_schema}"
    with store_for_reading(settings, "verify") as store:
        recorder = store.recorder
        merkle_log = store.merkle_log
        assert isinstance(recorder, PostgresRunQueueRecorder)
        assert merkle_log is not None
        keys = wiring.audit_verifier_keys(settings)
        try:
            report = verify_store(recorder, merkle_log, keys, on_fault=print, on_progress=_Progress())
        except NoVerifierKeyError:
            raise CommandError(NO_VERIFIER_KEY) from None
    checked = report.log
    assert checked is not None
    counts = (
        f"{report.chains.tasks} tasks, {report.chains.events} events, {checked.leaves} leaves,"
        f" {checked.checkpoints} checkpoints, {checked.purged} purged,"
        f" {checked.unsequenced} not yet sequenced"
    )
    if not report.signed:
        print(f"{where}: no signed checkpoint yet: only the chains were checked against the log")
    if report.faults:
        print(
            f"{where}: {report.faults} faults ({report.chains.faults} in chains,"
            f" {report.log_faults} in the signed log; {counts})"
        )
    else:
        print(f"{where}: every chain and the signed log verify ({counts})")
    return 1 if report.faults else 0


def _verify_archive(settings: Settings, path: Path) -> int:
    """Check an archive file: every task's chain, and (format version 3) its receipt with the keys."""
    try:
        version, histories = archive_histories(path)
        keys = wiring.audit_verifier_keys(settings)
        try:
            report = verify_archive(version, histories, keys, on_fault=print, on_progress=_Progress())
        except NoVerifierKeyError:
            raise CommandError(NO_VERIFIER_KEY) from None
    except ArchiveError as error:
        raise CommandError(str(error)) from error
    if report.receipts is None:
        _print_chains(report, str(path))
        return 1 if report.faults else 0
    chains = report.chains
    counts = f"{chains.tasks} tasks, {chains.events} events, {report.receipts} receipts"
    if report.faults:
        print(
            f"{path}: {report.faults} faults ({chains.faults} in chains,"
            f" {report.receipt_faults} in receipts; {counts})"
        )
        return 1
    print(f"{path}: every chain and receipt verifies ({counts})")
    return 0


def _print_chains(report: Verification, where: str) -> None:
    chains = report.chains
    if chains.faults:
        print(
            f"{where}: {chains.faults} faults in {chains.faulty_tasks} of {chains.tasks} tasks"
            f" ({chains.events} events checked)"
        )
    else:
        print(f"{where}: every chain verifies ({chains.tasks} tasks, {chains.events} events)")


class _Progress:
    """``verify``'s progress on stderr, at most every ``VERIFY_PROGRESS_S``, timed from each phase's start.

    A phase (the chains, then the signed log) starts when the one before it ended: at its last report.
    """

    def __init__(self) -> None:
        self._phase: type | None = None
        self._started = self._last = self._previous = time.monotonic()

    def __call__(self, report: ChainReport | LogReport) -> None:
        now = time.monotonic()
        if type(report) is not self._phase:
            if self._phase is not None:
                self._started = self._last = self._previous
            self._phase = type(report)
        self._previous = now
        if now - self._last < VERIFY_PROGRESS_S:
            return
        self._last = now
        if isinstance(report, ChainReport):
            done = f"{report.tasks} tasks, {report.events} events checked"
        else:
            done = f"{report.leaves} leaves checked"
        print(
            f"verify: {done} ({now - self._started:.0f} s), {report.faults} faults so far",
            file=sys.stderr,
            flush=True,
        )
