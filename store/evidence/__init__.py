"""Evidence: what proves the log was not changed behind longhaul's back.

The per-task hash chain, the Merkle log and its signed checkpoints, receipts, the checks
``longhaul verify`` and the audit pages run, the archive (archive then purge), and the stored
files the log refers to (their bytes checked, archived, and deleted once nothing holds them).

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use: the store's packages import each other's modules, so an eager face would
import in a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.evidence.archive import Archive as Archive
    from store.evidence.archive import ArchivedEvent as ArchivedEvent
    from store.evidence.archive import ArchivedHistory as ArchivedHistory
    from store.evidence.archive import ArchiveError as ArchiveError
    from store.evidence.archive import ArchiveRun as ArchiveRun
    from store.evidence.archive import archive_expired as archive_expired
    from store.evidence.archive import archive_file_lines as archive_file_lines
    from store.evidence.archive import archive_histories as archive_histories
    from store.evidence.archive import read_archive as read_archive
    from store.evidence.audit_trail import AuditEvent as AuditEvent
    from store.evidence.audit_trail import Effect as Effect
    from store.evidence.audit_trail import audit_events as audit_events
    from store.evidence.audit_trail import effects_document as effects_document
    from store.evidence.audit_trail import effects_of as effects_of
    from store.evidence.audit_trail import events_document as events_document
    from store.evidence.audit_trail import replay as replay
    from store.evidence.blocking_files import BlockingFiles as BlockingFiles
    from store.evidence.chain import ChainFault as ChainFault
    from store.evidence.chain import ChainReport as ChainReport
    from store.evidence.chain import ChainRow as ChainRow
    from store.evidence.chain import check_task as check_task
    from store.evidence.chain import task_uuid as task_uuid
    from store.evidence.chain import verify_chains as verify_chains
    from store.evidence.checkpoints import CheckpointError as CheckpointError
    from store.evidence.checkpoints import longhaul_origin as longhaul_origin
    from store.evidence.file_checks import FileFault as FileFault
    from store.evidence.file_checks import FileReport as FileReport
    from store.evidence.file_retention import FILE_INDEX_TABLE as FILE_INDEX_TABLE
    from store.evidence.file_retention import ErasedFiles as ErasedFiles
    from store.evidence.file_retention import FileRetention as FileRetention
    from store.evidence.file_retention import FileSweep as FileSweep
    from store.evidence.file_retention import sweep_files as sweep_files
    from store.evidence.key_files import KeyFileError as KeyFileError
    from store.evidence.key_files import create_signer_key as create_signer_key
    from store.evidence.key_files import load_signer_key as load_signer_key
    from store.evidence.log_audit import receipt_faults as receipt_faults
    from store.evidence.log_audit_reads import LogAuditReads as LogAuditReads
    from store.evidence.log_audit_reads import LogReport as LogReport
    from store.evidence.log_audit_reads import audit_store as audit_store
    from store.evidence.merkle import MerkleTree as MerkleTree
    from store.evidence.merkle_log import CHECKPOINTS_TABLE as CHECKPOINTS_TABLE
    from store.evidence.merkle_log import LEAVES_TABLE as LEAVES_TABLE
    from store.evidence.merkle_log import NODES_TABLE as NODES_TABLE
    from store.evidence.merkle_log import POSITION_TABLE as POSITION_TABLE
    from store.evidence.merkle_log import MerkleLog as MerkleLog
    from store.evidence.merkle_log import StoredCheckpoint as StoredCheckpoint
    from store.evidence.receipts import NoteError as NoteError
    from store.evidence.receipts import Receipt as Receipt
    from store.evidence.signed_notes import SignerKey as SignerKey
    from store.evidence.signed_notes import VerifierKey as VerifierKey
    from store.evidence.task_verification import TaskVerification as TaskVerification
    from store.evidence.task_verification import verify_task as verify_task
    from store.evidence.verification import ArchiveFiles as ArchiveFiles
    from store.evidence.verification import NoVerifierKeyError as NoVerifierKeyError
    from store.evidence.verification import StoredFiles as StoredFiles
    from store.evidence.verification import Verification as Verification
    from store.evidence.verification import verify_archive as verify_archive
    from store.evidence.verification import verify_store as verify_store

_HOMES = {
    "Archive": "store.evidence.archive",
    "ArchiveError": "store.evidence.archive",
    "ArchiveRun": "store.evidence.archive",
    "ArchivedEvent": "store.evidence.archive",
    "ArchivedHistory": "store.evidence.archive",
    "archive_expired": "store.evidence.archive",
    "archive_file_lines": "store.evidence.archive",
    "archive_histories": "store.evidence.archive",
    "read_archive": "store.evidence.archive",
    "AuditEvent": "store.evidence.audit_trail",
    "BlockingFiles": "store.evidence.blocking_files",
    "ErasedFiles": "store.evidence.file_retention",
    "FILE_INDEX_TABLE": "store.evidence.file_retention",
    "FileFault": "store.evidence.file_checks",
    "FileReport": "store.evidence.file_checks",
    "FileRetention": "store.evidence.file_retention",
    "FileSweep": "store.evidence.file_retention",
    "sweep_files": "store.evidence.file_retention",
    "CHECKPOINTS_TABLE": "store.evidence.merkle_log",
    "ChainFault": "store.evidence.chain",
    "ChainReport": "store.evidence.chain",
    "ChainRow": "store.evidence.chain",
    "CheckpointError": "store.evidence.checkpoints",
    "Effect": "store.evidence.audit_trail",
    "KeyFileError": "store.evidence.key_files",
    "LEAVES_TABLE": "store.evidence.merkle_log",
    "LogAuditReads": "store.evidence.log_audit_reads",
    "LogReport": "store.evidence.log_audit_reads",
    "MerkleLog": "store.evidence.merkle_log",
    "MerkleTree": "store.evidence.merkle",
    "NODES_TABLE": "store.evidence.merkle_log",
    "NoVerifierKeyError": "store.evidence.verification",
    "ArchiveFiles": "store.evidence.verification",
    "StoredFiles": "store.evidence.verification",
    "NoteError": "store.evidence.receipts",
    "POSITION_TABLE": "store.evidence.merkle_log",
    "Receipt": "store.evidence.receipts",
    "SignerKey": "store.evidence.signed_notes",
    "StoredCheckpoint": "store.evidence.merkle_log",
    "TaskVerification": "store.evidence.task_verification",
    "Verification": "store.evidence.verification",
    "VerifierKey": "store.evidence.signed_notes",
    "audit_events": "store.evidence.audit_trail",
    "audit_store": "store.evidence.log_audit_reads",
    "check_task": "store.evidence.chain",
    "create_signer_key": "store.evidence.key_files",
    "effects_document": "store.evidence.audit_trail",
    "effects_of": "store.evidence.audit_trail",
    "events_document": "store.evidence.audit_trail",
    "load_signer_key": "store.evidence.key_files",
    "longhaul_origin": "store.evidence.checkpoints",
    "receipt_faults": "store.evidence.log_audit",
    "replay": "store.evidence.audit_trail",
    "task_uuid": "store.evidence.chain",
    "verify_archive": "store.evidence.verification",
    "verify_chains": "store.evidence.chain",
    "verify_store": "store.evidence.verification",
    "verify_task": "store.evidence.task_verification",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
