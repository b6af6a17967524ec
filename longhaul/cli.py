"""The ``longhaul`` command line: one subcommand per process, plus ``up`` that runs them all."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from uuid import UUID

from pydantic import ValidationError
from pydantic_settings import SettingsError

from longhaul import admin, cli_help, evidence_commands, logs, processes, reports, supervisor, wiring
from longhaul import tail as tail_consumer
from longhaul.errors import BadArgumentError, CommandError
from longhaul.settings import Settings, unknown_variables

log = logging.getLogger("longhaul")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="longhaul",
        description="A durable runtime for long-running A2A tasks. Settings come from LONGHAUL_* variables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "up", help="run everything in one process (embedded PostgreSQL and NATS when no URLs are set)"
    )
    sub.add_parser("gateway", help="serve A2A over HTTP (JSON-RPC and HTTP+JSON) and the agent card")
    sub.add_parser("worker", help="claim runnable tasks under a lease and run their steps")
    sub.add_parser("sweeper", help="end pauses past their deadline; expire tasks past retention")
    sub.add_parser("relay", help="publish every committed event to NATS JetStream, in commit order")
    sub.add_parser(
        "projector",
        help="keep the current-task view, the retention index and the file index following the log",
    )
    sub.add_parser("dispatcher", help="deliver push notifications (webhooks) with retries, signed")
    sub.add_parser(
        "sequencer",
        help="keep the Merkle tree over every event; sign checkpoints of it, publish them on NATS",
    )
    projections = sub.add_parser(
        "projections",
        help="the read models (task view, retention index, file index): rebuild them, or show their lag",
    )
    actions = projections.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="rebuild or status"
    )
    actions.add_parser("rebuild", help="rebuild the read models from the log (the service may run)")
    actions.add_parser("status", help="the current-task view's position in the log, and how far it trails")
    iam = sub.add_parser("fake-iam", help="run the fake IAM service the access-review skill calls")
    iam.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    iam.add_argument("--port", type=int, default=8090, help="port to listen on (default: %(default)s)")
    _audit_commands(sub)
    tail = sub.add_parser("tail", help="print live task events from NATS, one line each")
    tail.add_argument("--tenant", help="only this tenant's tasks")
    tail.add_argument("--task", type=UUID, metavar="TASK_ID", help="only this task's events")
    start = tail.add_mutually_exclusive_group()
    start.add_argument("--from-start", action="store_true", help="start with every event the stream keeps")
    start.add_argument(
        "--since", type=_since, metavar="WHEN", help="start at a time (ISO 8601) or a duration ago (PT1H)"
    )
    tail.add_argument("--json", action="store_true", help="print each message's JSON, one per line")
    sub.add_parser("skills", help="list skills, versions and live tasks per version (drain status)")
    retrying = sub.add_parser(
        "retrying", help="list working tasks whose current step failed (attempts so far, last failure)"
    )
    retrying.add_argument(
        "--limit",
        type=_count,
        default=100,
        help="list at most this many, newest first (default: %(default)s)",
    )
    sub.add_parser("migrate", help="apply pending schema migrations; print them and the schema version")
    keys = sub.add_parser("keys", help="API keys: mint one for a tenant and print its key file line")
    key_actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION", help="new")
    new_key = key_actions.add_parser("new", help="mint a key; print it and the line for the key file")
    new_key.add_argument("tenant", metavar="TENANT", help="the tenant the key authenticates as")
    erase = sub.add_parser(
        "erase",
        help="destroy the secret keys of a tenant's tasks and delete their stored files",
    )
    erase.add_argument("--tenant", required=True, metavar="TENANT", help="the tenant whose keys go")
    cli_help.describe_main(parser)
    for name, command in sub.choices.items():
        cli_help.describe(name, command)
    return parser


def _audit_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that read a task's log: history, deliveries, archive, receipt, verify."""
    history = sub.add_parser("history", help="print every event of a task with its actor, in order")
    history.add_argument("task_id", type=UUID, metavar="TASK_ID", help="the task's id (a UUID)")
    history.add_argument("--json", action="store_true", help="one JSON document, for machines")
    history.add_argument(
        "--archive", type=Path, metavar="FILE", help="read the task from this archive file, not the store"
    )
    read = history.add_mutually_exclusive_group()
    read.add_argument(
        "--at-version", type=_version, metavar="N", help="print the task's state as it was after version N"
    )
    read.add_argument("--effects", action="store_true", help="list the run-once side effects and results")
    deliveries = sub.add_parser("deliveries", help="print a task's webhook deliveries and every attempt")
    deliveries.add_argument("task_id", type=UUID, metavar="TASK_ID", help="the task's id (a UUID)")
    deliveries.add_argument("--json", action="store_true", help="one JSON object per delivery, for machines")
    archive = sub.add_parser(
        "archive", help="write expired tasks to a verified archive file, then purge them"
    )
    archive.add_argument(
        "--to", type=Path, required=True, metavar="DIR", help="directory the archive file is written to"
    )
    archive.add_argument(
        "--files-by-reference",
        action="store_true",
        help="name the stored files by hash and keep them in the file store, instead of their bytes",
    )
    receipt = sub.add_parser(
        "receipt", help="print a task's receipt: the latest signed checkpoint and its last event's proof"
    )
    receipt.add_argument("task_id", type=UUID, metavar="TASK_ID", help="the task's id (a UUID)")
    receipt.add_argument(
        "--out", type=Path, metavar="FILE", help="write the receipt to this file instead of printing it"
    )
    verify = sub.add_parser(
        "verify", help="check every chain and the signed checkpoints (the store), or an archive file"
    )
    verify.add_argument(
        "--archive", type=Path, metavar="FILE", help="check the tasks of this archive file, not the store"
    )
    files = verify.add_mutually_exclusive_group()
    files.add_argument(
        "--files-sample",
        type=_count,
        metavar="N",
        help="rehash N of the stored files the tasks refer to, chosen at random (default: every one)",
    )
    files.add_argument("--no-files", action="store_true", help="do not read the stored files")


def _from_one(what: str) -> Callable[[str], int]:
    """An argument type: a whole number from 1, called ``what`` in its errors."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}: a whole number from 1") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{number} is not a {what}: {what}s start at 1")
        return number

    return parse


_version = _from_one("version")
_count = _from_one("count")


def _since(text: str) -> datetime:
    try:
        return tail_consumer.parse_since(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``longhaul`` console script."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as error:
        print("longhaul: invalid settings:", file=sys.stderr)
        for problem in error.errors():
            name = "LONGHAUL_" + "_".join(str(p) for p in problem["loc"]).upper()
            print(f"  {name}: {problem['msg']}", file=sys.stderr)
        return 2
    except SettingsError as error:  # a list setting that is not JSON
        print(
            f'longhaul: invalid settings: {error} (list settings are JSON, e.g. ["my.skills"])',
            file=sys.stderr,
        )
        return 2
    logs.configure(settings.log_format)
    for warning in unknown_variables(os.environ):
        log.warning("%s", warning)
    try:
        code = _dispatch(args, settings)
        sys.stdout.flush()  # here, not at exit: a reader that went away is seen below
    except BrokenPipeError:
        return _reader_went_away()
    except (CommandError, wiring.ConfigurationError) as error:
        if settings.log_format == "json":  # a log collector reads stderr: keep it JSON lines
            log.error("%s", error)
        else:
            print(f"longhaul: {error}", file=sys.stderr)
        return 2 if isinstance(error, BadArgumentError) else 1
    except KeyboardInterrupt:
        return 130
    return code


SIGPIPE_EXIT = 141
"""The status a shell reports for a writer its pipe's reader left (128 + SIGPIPE)."""


def _reader_went_away() -> int:
    """Stop quietly when stdout's reader closed the pipe (``longhaul history ID | head -1``).

    Python ignores SIGPIPE, so the write raised instead; stdout is pointed at /dev/null so that
    the interpreter's last flush at exit does not raise again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT


PROCESSES = {
    "up": supervisor.up,
    "gateway": processes.gateway,
    "worker": processes.worker,
    "sweeper": processes.sweeper,
    "relay": processes.relay,
    "projector": processes.projector,
    "dispatcher": processes.dispatcher,
    "sequencer": processes.sequencer,
}
"""The long-running commands: each runs until SIGINT/SIGTERM."""


def _tail(args: argparse.Namespace, settings: Settings) -> int:
    start = tail_consumer.Start(from_start=args.from_start, since=args.since)
    return reports.tail(settings, tenant=args.tenant, task_id=args.task, start=start, as_json=args.json)


ONE_SHOT: dict[str, Callable[[argparse.Namespace, Settings], int]] = {
    "projections": lambda args, settings: admin.projections(settings, args.action),
    "history": lambda args, settings: reports.history(
        settings,
        args.task_id,
        as_json=args.json,
        archive=args.archive,
        at_version=args.at_version,
        effects=args.effects,
    ),
    "deliveries": lambda args, settings: reports.deliveries(settings, args.task_id, as_json=args.json),
    "archive": lambda args, settings: evidence_commands.archive(
        settings, args.to, files_by_reference=args.files_by_reference
    ),
    "receipt": lambda args, settings: reports.receipt(settings, args.task_id, out=args.out),
    "verify": lambda args, settings: evidence_commands.verify(
        settings, args.archive, files_sample=args.files_sample, check_files=not args.no_files
    ),
    "tail": _tail,
    "skills": lambda _, settings: reports.skills(settings),
    "retrying": lambda args, settings: reports.retrying(settings, limit=args.limit),
    "migrate": lambda _, settings: admin.migrate(settings),
    "keys": lambda args, _: admin.keys_new(args.tenant),
    "erase": lambda args, settings: admin.erase(settings, args.tenant),
}
"""The commands that do one thing and exit with its status."""


ON_UVLOOP = frozenset({"dispatcher", "relay", "up"})
"""The processes that run on uvloop's event loop where it is installed (not on Windows): the
dispatcher and the relay, which drain full streams with less CPU per message on it (ADRs 0033,
0039), and ``up``, whose request path, worker and relay share one loop (ADR 0045). The other
processes keep asyncio's."""


def freeze_startup_heap() -> None:
    """Put every object alive before a process starts serving out of the collector's reach.

    The modules, classes and functions imported at startup (about 100,000 objects in ``up``) live
    as long as the process, yet each full collection of the oldest generation walked them all, a
    pause of tens to hundreds of milliseconds with every request or frame behind it waiting
    (ADR 0053).
    ``gc.freeze`` moves them to a generation no collection visits; collecting first keeps the
    imports' own garbage out of it. Cycles made later are collected as before.
    """
    gc.collect()
    gc.freeze()


def _run_process(command: str, settings: Settings) -> None:
    process = PROCESSES[command](settings)
    loop_factory = None
    if command in ON_UVLOOP:
        try:
            import uvloop  # noqa: PLC0415 - only the processes that use it pay for the import
        except ImportError:  # no wheel for this platform: asyncio's loop does the same, slower
            pass
        else:
            loop_factory = uvloop.new_event_loop
    freeze_startup_heap()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(process)


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in PROCESSES:
        _run_process(args.command, settings)
        return 0
    if args.command == "fake-iam":
        asyncio.run(processes.fake_iam(args.host, args.port))
        return 0
    return ONE_SHOT[args.command](args, settings)


if __name__ == "__main__":
    sys.exit(main())
