"""The commands on the log's evidence: ``verify`` (the store, or an archive file) and ``archive``.

They parse nothing and decide nothing: the checks are ``store.evidence.verify_store`` and
``verify_archive``, the archive run is ``store.evidence.archive`` and the deletion of the files
nothing holds any more ``store.evidence.sweep_files``; here they are called and printed.
Faults go to stdout as they are found, progress to stderr.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

from longhaul import wiring
from longhaul.errors import CommandError
from longhaul.local_services import store_for_reading
from longhaul.settings import Settings
from store.evidence import (
    ArchiveError,
    ArchiveFiles,
    BlockingFiles,
    ChainReport,
    FileReport,
    FileRetention,
    FileSweep,
    LogReport,
    NoVerifierKeyError,
    StoredFiles,
    Verification,
    archive_expired,
    archive_file_lines,
    archive_histories,
    sweep_files,
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


def archive(settings: Settings, directory: Path, *, files_by_reference: bool = False) -> int:
    """Archive every expired task to one verified file in ``directory``, then purge them.

    The bytes of their stored files go into a tar beside it (``files_by_reference``: only their
    hashes and the store that keeps them); then the files nothing holds any more are deleted.
    1 if a task was refused for a fault in its chain or a missing file (named on stderr), else 0.
    """
    clock = wiring.system_clock(settings)
    with (
        store_for_reading(settings, "archive") as store,
        BlockingFiles(lambda: wiring.file_store(settings)) as files,
    ):
        try:
            run = archive_expired(
                store, directory, clock=clock, files=files, files_by_reference=files_by_reference
            )
        except ArchiveError as error:
            raise CommandError(str(error)) from error
        sweep = sweep_files(store, files, now=clock())
    left = (
        f"; {len(run.unsequenced)} not yet in a signed checkpoint and stay" if run.unsequenced else ""
    ) + (f"; {len(run.refused)} refused for faults (named above), not archived" if run.refused else "")
    for faults in run.refused.values():
        for fault in faults:
            print(f"refused: {fault}", file=sys.stderr)
    if run.path is None:
        print(("nothing archived" + left) if left else "no expired tasks: nothing archived")
        _print_sweep(sweep)
        return 1 if run.refused else 0
    print(run.path)
    if run.files_path is not None:
        print(run.files_path)
    kept = "named by reference" if files_by_reference else "with their bytes"
    print(
        f"archived {run.tasks} tasks ({run.events} events"
        + (f", {run.files} stored files {kept}" if run.files else "")
        + f"), verified; purged {len(run.purged)}"
        + (f"; {len(run.skipped)} changed meanwhile and stay" if run.skipped else "")
        + left,
        file=sys.stderr,
    )
    _print_sweep(sweep)
    return 1 if run.refused else 0


def _print_sweep(sweep: FileSweep) -> None:
    """What the deletion of unheld files did, on stderr (nothing when it did nothing)."""
    said = []
    if sweep.deleted or sweep.held:
        said.append(f"deleted {sweep.deleted} stored files nothing holds any more ({sweep.held} still held)")
    if sweep.waiting:
        said.append(
            f"{sweep.waiting} stored files wait to be deleted: the file index trails the log"
            " (run a projector, then archive again)"
        )
    if sweep.uploads_expired:
        said.append(f"{sweep.uploads_expired} old uploads let go of")
    if sweep.incoming_removed:
        said.append(f"{sweep.incoming_removed} unfinished writes removed")
    if said:
        print("files: " + "; ".join(said), file=sys.stderr)


def verify(
    settings: Settings,
    archive: Path | None = None,
    *,
    files_sample: int | None = None,
    check_files: bool = True,
) -> int:
    """Check every chain, the Merkle log against the signed checkpoints and the stored files.

    1 if any fault, else 0. The stored files the chains refer to are read and hashed: every one,
    ``files_sample`` chosen at random, or none (``check_files`` false). With ``archive``: the
    file's chains, (format version 3) receipts and (version 4) files instead.
    """
    if archive is not None:
        return _verify_archive(settings, archive, check_files=check_files)
    where = f"schema {settings.database_schema}"
    with store_for_reading(settings, "verify") as store, ExitStack() as opened:
        recorder = store.recorder
        merkle_log = store.merkle_log
        assert isinstance(recorder, PostgresRunQueueRecorder)
        assert merkle_log is not None
        keys = wiring.audit_verifier_keys(settings)
        files = None
        if check_files:
            blocking = opened.enter_context(BlockingFiles(lambda: wiring.file_store(settings)))
            erased = frozenset(FileRetention(store).erased())
            files = StoredFiles(blocking, erased=erased, sample=files_sample)
        try:
            report = verify_store(
                recorder, merkle_log, keys, on_fault=print, on_progress=_Progress(), files=files
            )
        except NoVerifierKeyError:
            raise CommandError(NO_VERIFIER_KEY) from None
    checked = report.log
    assert checked is not None
    counts = (
        f"{report.chains.tasks} tasks, {report.chains.events} events, {checked.leaves} leaves,"
        f" {checked.checkpoints} checkpoints, {checked.purged} purged,"
        f" {checked.unsequenced} not yet sequenced{_file_counts(report.files)}"
    )
    if not report.signed:
        print(f"{where}: no signed checkpoint yet: only the chains were checked against the log")
    has_files = report.files is not None and report.files.referenced > 0
    if report.faults:
        file_faults = f", {report.files.faults} in stored files" if report.files and has_files else ""
        print(
            f"{where}: {report.faults} faults ({report.chains.faults} in chains,"
            f" {report.log_faults} in the signed log{file_faults}; {counts})"
        )
    else:
        what = (
            "every chain, the signed log and the stored files read"
            if has_files
            else ("every chain and the signed log")
        )
        print(f"{where}: {what} verify ({counts})")
    return 1 if report.faults else 0


def _file_counts(files: FileReport | None) -> str:
    """The summary's words on the stored files: how many referenced, read, erased (none: no words)."""
    if files is None:
        return ", stored files not checked"
    if not files.referenced:
        return ""
    said = f", {files.checked} of {files.referenced} stored files rehashed"
    if files.erased:
        said += f" ({files.erased} erased with their tenant)"
    if files.by_reference:
        said += f", {files.by_reference} named by reference not read"
    return said


def _verify_archive(settings: Settings, path: Path, *, check_files: bool = True) -> int:
    """Check an archive file: its chains, receipts (version 3) and stored files (version 4).

    The files' bytes are read from the archive's tar, and (with ``check_files``) those it names
    by reference from the file store.
    """
    try:
        version, histories = archive_histories(path)
        keys = wiring.audit_verifier_keys(settings)
        with ExitStack() as opened:
            files = None
            if version >= 4:
                blocking = None
                lines = archive_file_lines(path)
                if check_files and any(line.kept == "store" for line in lines.values()):
                    blocking = opened.enter_context(BlockingFiles(lambda: wiring.file_store(settings)))
                files = ArchiveFiles(path, lines, blocking)
            try:
                report = verify_archive(
                    version, histories, keys, on_fault=print, on_progress=_Progress(), files=files
                )
            except NoVerifierKeyError:
                raise CommandError(NO_VERIFIER_KEY) from None
    except ArchiveError as error:
        raise CommandError(str(error)) from error
    if report.receipts is None:
        _print_chains(report, str(path))
        return 1 if report.faults else 0
    chains = report.chains
    counts = f"{chains.tasks} tasks, {chains.events} events, {report.receipts} receipts"
    has_files = report.files is not None and report.files.referenced > 0
    if report.files is not None:
        counts += _file_counts(report.files)
    if report.faults:
        file_faults = f", {report.files.faults} in stored files" if report.files and has_files else ""
        print(
            f"{path}: {report.faults} faults ({chains.faults} in chains,"
            f" {report.receipt_faults} in receipts{file_faults}; {counts})"
        )
        return 1
    what = "every chain, receipt and stored file read" if has_files else "every chain and receipt"
    print(f"{path}: {what} verifies ({counts})")
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

    def __call__(self, report: ChainReport | LogReport | FileReport) -> None:
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
        elif isinstance(report, FileReport):
            done = f"{report.checked} of {report.referenced} stored files rehashed"
        else:
            done = f"{report.leaves} leaves checked"
        print(
            f"verify: {done} ({now - self._started:.0f} s), {report.faults} faults so far",
            file=sys.stderr,
            flush=True,
        )
