"""The ``--help`` text of each ``longhaul`` command: what it does, and the settings it reads most.

The settings part is built from the field descriptions of ``longhaul.settings.Settings``, so it
says what the settings table of ``docs/operations.md`` says (both are checked against the code).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from datetime import timedelta

from longhaul.settings import PREFIX, Settings

WIDTH = 88

DESCRIPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "up": (
        (
            "Run everything in one process: the gateway, one worker, the sweeper, the relay, the projector,"
            " the webhook dispatcher and the sequencer, until"
            " Ctrl-C or SIGTERM, then stop them all (running steps drain first) and keep the data.\n"
            "With no LONGHAUL_DATABASE_URL / LONGHAUL_NATS_URL it starts an embedded PostgreSQL and NATS"
            " with their data in LONGHAUL_DATA_DIR; with no LONGHAUL_IAM_URL a fake IAM for the"
            " access-review skill. It logs 'longhaul is up: <agent card URL>' when it serves. Two `up`s"
            " cannot share one data directory."
        ),
        (
            "store",
            "database_url",
            "nats_url",
            "iam_url",
            "data_dir",
            "host",
            "port",
            "api_key_file",
            "log_format",
        ),
    ),
    "gateway": (
        (
            "Serve A2A 1.0 over HTTP until stopped: JSON-RPC at /a2a/jsonrpc and the agent card at"
            " /.well-known/agent-card.json. Stateless: run any number behind a load balancer. Without NATS"
            " it serves anyway, and blocking calls poll the log. With API keys (LONGHAUL_API_KEY_FILE,"
            " LONGHAUL_API_KEYS) every method needs a bearer key and runs as its tenant; without, it"
            " serves one open dev tenant and logs a WARNING saying so."
        ),
        (
            "database_url",
            "host",
            "port",
            "public_url",
            "nats_url",
            "default_skill",
            "skill_modules",
            "allow_private_webhooks",
            "api_key_file",
            "api_keys",
            "max_in_flight",
            "overload_target_seconds",
        ),
    ),
    "worker": (
        (
            "Claim runnable tasks under a lease and run their steps until stopped. On SIGTERM it stops"
            " claiming, lets running steps reach their next commit and releases its leases. It refuses to"
            " start when live tasks need a skill version this release lacks (see `longhaul skills`)."
        ),
        (
            "database_url",
            "lease_seconds",
            "worker_concurrency",
            "worker_grace_seconds",
            "iam_url",
            "skill_modules",
            "max_pause",
            "step_max_attempts",
            "step_timeout",
        ),
    ),
    "sweeper": (
        (
            "End pauses (input or auth required) past their deadline, and expire terminal tasks past"
            " their retention, until stopped. One is enough; more are harmless."
        ),
        ("database_url", "sweep_interval_seconds", "retention", "retention_overrides"),
    ),
    "relay": (
        (
            "Publish every committed event to NATS JetStream, in commit order, until stopped. One relay"
            " leads (it holds a PostgreSQL advisory lock); others wait as standbys and take over within"
            " about a second."
        ),
        ("database_url", "nats_url", "nats_stream", "nats_subject_prefix", "nats_max_age", "nats_replicas"),
    ),
    "projector": (
        (
            "Keep the current-task view (what ListTasks reads), the retention index (what the"
            " sweeper searches) and the file index (which tasks refer to which stored files: what"
            " `archive` and `erase` ask before they delete one) following the log until stopped,"
            " with exactly-once tracking: each"
            " row and the log position it reflects are one transaction. After a failure each starts"
            " again from its recorded position. Not with LONGHAUL_STORE=memory."
        ),
        ("database_url", "database_schema"),
    ),
    "dispatcher": (
        (
            "Deliver push notifications until stopped: for every event of a task with push configs, POST"
            " its A2A StreamResponse to each config's URL, signed (Standard Webhooks) with the tenant's"
            " secret, retried with backoff for LONGHAUL_WEBHOOK_RETRY_FOR, in version order per task and"
            " config. Follows a durable JetStream consumer; records every delivery and attempt in"
            " PostgreSQL (`longhaul deliveries TASK_ID`). Run any number: one takes events in (the others"
            " stand by), all deliver, each lane claimed by one at a time."
            " Not with LONGHAUL_STORE=memory. See docs/webhooks.md."
        ),
        (
            "database_url",
            "nats_url",
            "webhook_secret",
            "webhook_secrets",
            "webhook_retry_for",
            "webhook_timeout_seconds",
            "webhook_concurrency",
            "allow_private_webhooks",
        ),
    ),
    "sequencer": (
        (
            "Keep the Merkle tree (RFC 9162) over every event, in log order, until stopped: one leaf per"
            " event, the events that arrive within LONGHAUL_SEQUENCER_GATHER_SECONDS of a batch's first"
            " stored with their subtrees and the position reached in one transaction. Every"
            " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS, when the tree grew, sign a checkpoint of it with the"
            " audit key (C2SP tlog-checkpoint, Ed25519), store it, then publish it on NATS"
            " (<prefix>.checkpoints, a stream of its own) for witnesses; a clean stop signs what was"
            " sequenced. One sequencer leads (a PostgreSQL advisory lock); others wait as standbys."
            " Not with LONGHAUL_STORE=memory. See docs/audit.md, Sequencer."
        ),
        (
            "database_url",
            "nats_url",
            "audit_key_file",
            "checkpoint_interval_seconds",
            "sequencer_gather_seconds",
            "nats_replicas",
        ),
    ),
    "deliveries": (
        (
            "Print every webhook delivery of a task (version, event, config, URL, state) and each of its"
            " attempts (time, HTTP status, duration, outcome, error); --json: one JSON object per"
            " delivery. 'GAVE UP' marks deliveries whose retry period ended or that the receiver"
            " refused. Finds the database as `history` does."
        ),
        ("database_url", "database_schema", "data_dir"),
    ),
    "projections": (
        (
            "The read models. `rebuild` recomputes the current-task view, the retention index and the"
            " file index from the log while the service runs (a running projector waits, then carries on);"
            " `status` prints each one's log position and how far it trails the log."
        ),
        ("database_url", "database_schema", "data_dir"),
    ),
    "fake-iam": (
        (
            "Serve the fake IAM service the access-review skill calls, until stopped. A demo service for"
            " development (longhaul/demo/fake_iam.py), not for production; `up` starts one by itself."
        ),
        (),
    ),
    "history": (
        (
            "Print every event of a task, in order: version, time, type, actor (the worker and its lease"
            " epoch, the client's tenant and API key id, or the sweeper) and fields. --at-version N prints"
            " the task's state as it was after version N (the A2A Task the gateway answered then, and"
            " longhaul's own fields: lease, step, checkpoint, pause, effects); a version the task does not"
            " have exits 2. --effects lists every run-once side effect with its key, result and time."
            " --json prints one JSON document instead. Reads the database at LONGHAUL_DATABASE_URL;"
            " unset, that of a running"
            " `longhaul up` in LONGHAUL_DATA_DIR, else it starts the embedded PostgreSQL for the command."
            " With --archive FILE it reads the task from an archive file instead (`longhaul archive`),"
            " with the same output, and needs no database."
        ),
        ("database_url", "database_schema", "data_dir"),
    ),
    "archive": (
        (
            "Write every expired task's events (all versions, as stored) to one gzip JSON-lines file in"
            " DIR and print its path; read the file back and verify it (checksum, counts, each task's"
            " versions complete and in order); only then purge those tasks from the store: events,"
            " their chain hashes, snapshots, run-queue row, current-task view row and webhook"
            " deliveries, one transaction per task. A run stopped early purges nothing unverified;"
            " run it again. Finds the database as `history` does. Each event goes with its chain"
            " hash, and each task's events with the receipt of its last one (`longhaul verify --archive"
            " FILE` checks them). A task no signed checkpoint covers yet stays for a later run; one"
            " whose chain has a fault, or that refers to a stored file the file store lacks, is"
            " refused, named on stderr, and the run exits 1. Format: docs/audit.md, The archive format."
            "\n"
            "The bytes of every stored file the archived events refer to go, each once, into a tar"
            " beside the archive (DIR/longhaul-archive-....files.tar, members files/<sha256>, its path"
            " printed too), read back and checked against their hashes before the purge; with"
            " --files-by-reference only their hashes and the file store are named, and the files stay"
            " in the store for the archive. After the purge, the stored files no task, recent upload"
            " or archive holds any more are deleted from LONGHAUL_FILE_STORE_URL (the file index must"
            " have caught up with the log: a projector runs), as are writes to it that never finished."
        ),
        ("database_url", "database_schema", "data_dir", "file_store_url"),
    ),
    "receipt": (
        (
            "Print the receipt of a task (docs/audit.md, Receipts): the latest signed checkpoint and the"
            " inclusion proof of the task's last event it covers, as one JSON document; --out FILE writes"
            " it to FILE instead. It verifies offline, without longhaul: copy store/evidence/receipts.py"
            " anywhere"
            " and run `python receipts.py verify RECEIPT.json --key VKEY` with the log's verifier key"
            " (`up` logs it; the gateway serves it at /audit/v1/log-key). Exits 1 when the task is"
            " unknown or no signed checkpoint covers it yet (the sequencer signs one every"
            " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS). Finds the database as `history` does."
        ),
        ("database_url", "database_schema", "data_dir"),
    ),
    "verify": (
        (
            "Check every task's hash chain (docs/audit.md, Chain and Verify): each event against the"
            " hash stored beside it, chained to the one before; then the Merkle log against the signed"
            " checkpoints, with the verifier keys (the signer key's file, LONGHAUL_AUDIT_VERIFIER_KEYS):"
            " each checkpoint's signature, every leaf against the log, every subtree and signed root,"
            " the consistency of consecutive checkpoints. Prints one line per fault, naming the task"
            " and version (or the checkpoint, or the leaves) and what is wrong (missing-version,"
            " event-deleted, extra-event, hash-mismatch, out-of-order, deleted, not-in-log,"
            " not-in-tree, leaf-mismatch, root-mismatch, inconsistent, ...), then a summary with"
            " counts; progress on stderr every few seconds. Exits 1 if any fault, else 0. With"
            " --archive FILE it checks an archive file's chains and receipts (`longhaul archive`) and"
            " needs no database. Finds the database as `history` does."
            "\n"
            "Then it reads every stored file the tasks' events refer to from LONGHAUL_FILE_STORE_URL"
            " and hashes it: a file missing, or whose bytes hash or count otherwise than the event"
            " says, is one line 'task T: file sha256:H (NAME): missing ...' or 'changed: ...'. Files of"
            " tasks erased with their tenant (`longhaul erase`) are counted, not faults."
            " --files-sample N reads N of them chosen at random; --no-files none. With --archive, the"
            " bytes in the archive's tar (and those it names by reference, in the file store)."
        ),
        (
            "database_url",
            "database_schema",
            "data_dir",
            "audit_key_file",
            "audit_verifier_keys",
            "file_store_url",
        ),
    ),
    "tail": (
        (
            "Print task events live from NATS until Ctrl-C, one line each: time, tenant, task, version,"
            " type and the start of the body (--json: each message's JSON). New events only, unless"
            " --from-start or --since. --tenant and --task filter by subject. An ordered, ephemeral"
            " JetStream consumer: an example for analytics consumers (longhaul/tail.py). Uses"
            " LONGHAUL_NATS_URL; unset, the NATS of a running `longhaul up` in LONGHAUL_DATA_DIR."
        ),
        ("nats_url", "nats_stream", "nats_subject_prefix", "data_dir"),
    ),
    "skills": (
        (
            "List every skill version with its live task count and drain status: 'newest', 'draining',"
            " 'drained: can be removed' or 'MISSING from this release'. Finds the database as `history`"
            " does."
        ),
        ("database_url", "database_schema", "skill_modules", "data_dir"),
    ),
    "retrying": (
        (
            "List the working tasks whose current step has failed attempts (it raised, timed out or lost"
            " its worker), newest first, with the attempts so far and the last failure, from the"
            " current-task view (a projector must run). A task leaves the list when the step succeeds,"
            " and ends FAILED once its attempts are spent (LONGHAUL_STEP_MAX_ATTEMPTS). Finds the"
            " database as `history` does."
        ),
        ("database_url", "database_schema", "step_max_attempts", "data_dir"),
    ),
    "migrate": (
        (
            "Apply pending schema migrations and print each one applied and the schema's version."
            " Opening the store migrates too, so this is for doing it on demand. Finds the database as"
            " `history` does."
        ),
        ("database_url", "database_schema", "data_dir"),
    ),
    "keys": (
        (
            "`keys new TENANT` mints an API key for TENANT (256 random bits, `lh_...`) and prints it"
            " with its key id (the first 8 hex digits of its SHA-256, which the events of its calls"
            " record) and the line that makes gateways accept it: 'NAME TENANT sha256:HEX'. Append the line"
            " to the file at LONGHAUL_API_KEY_FILE and restart the gateways; give the key to the client,"
            " who sends it as 'Authorization: Bearer <key>'. The key is printed once and stored nowhere."
        ),
        ("api_key_file", "api_keys"),
    ),
    "erase": (
        (
            "Destroy the secret keys of every task of TENANT (--tenant) and print how many: the secrets"
            " its clients sent (answers to TASK_STATE_AUTH_REQUIRED, parts marked secret), stored sealed"
            " in the log, become unreadable everywhere, archives and backups included. The events stay,"
            " ciphertext and all, so `longhaul verify` still passes. A live task whose next step needs"
            " a destroyed secret fails, saying so. Finds the database as `history` does. See"
            " docs/operations.md, Secrets and erasure."
            "\n"
            "It also records the tenant's tasks as erased and deletes from LONGHAUL_FILE_STORE_URL the"
            " stored files their events and the tenant's uploads refer to, unless a task of another"
            " tenant (or an archive that names it by reference) holds the same bytes; their hashes stay"
            " in the events, and `verify` counts them as erased, not missing. Exits 1 if some files"
            " must wait because the file index trails the log (run a projector, then erase again)."
        ),
        ("database_url", "database_schema", "data_dir", "file_store_url"),
    ),
}
"""Per command: its description (paragraphs split by newlines), then the settings it reads most."""

MAIN_EPILOG = (
    "Every setting is a LONGHAUL_* environment variable (`longhaul COMMAND --help` names those a"
    " command reads most; docs/operations.md lists them all). Exit status: 0 after a normal stop, 1"
    " when a command cannot run, 2 for invalid settings."
)


def _fill(text: str) -> str:
    return "\n\n".join(textwrap.fill(paragraph, WIDTH) for paragraph in text.split("\n"))


def _settings_text(names: tuple[str, ...]) -> str:
    lines = ["settings it reads most:"]
    for name in names:
        field = Settings.model_fields[name]
        default = field.get_default(call_default_factory=True)
        shown = _shown(default)
        text = f"{PREFIX}{name.upper()}  {field.description} (default: {shown})"
        lines.append(textwrap.fill(text, WIDTH, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def _shown(value: object) -> str:
    """A default the way the docs write it: ``unset``, ``30``, ``P7D``, ``[]``."""
    if value is None:
        return "unset"
    if isinstance(value, timedelta):
        days, seconds = divmod(value.total_seconds(), 86400)
        return f"P{days:g}D" if not seconds else f"PT{value.total_seconds():g}S"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def describe(name: str, parser: argparse.ArgumentParser) -> None:
    """Give the subcommand ``name``'s ``parser`` its description and an epilog naming its settings.

    A command missing from ``DESCRIPTIONS`` keeps its own (``tests/cli`` requires one).
    """
    if name not in DESCRIPTIONS:
        return
    description, settings = DESCRIPTIONS[name]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = _fill(description)
    parser.epilog = _settings_text(settings) if settings else None


def describe_main(parser: argparse.ArgumentParser) -> None:
    """Give the top-level parser its epilog."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _fill(MAIN_EPILOG)
