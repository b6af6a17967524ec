"""Client CPU per delivery of the dispatcher's record and finish statements, against another tree's.

``DeliveryRecorder.record`` (the intake's insert) and ``DeliveryRecorder.finish`` (the group
commit of finished attempts), as the dispatcher uses them at load: batches of ``--tasks`` tasks
with two deliveries each (one lane per task, claimed whole by the insert), the first of each
lane finished without a lease, the second with one (the next-claim part runs). Measured with
this process's CPU (``bench.process_cpu.this_process_seconds``: the Python side, building
parameters, psycopg dumping and loading) and the wall clock (the statement on the server too).

The baseline, in the same run: ``store/deliveries/records.py`` of ``--tree DIR`` (another checkout,
e.g. the code before a change), loaded beside this tree's; rounds alternate the two (ABBA),
each in a fresh schema. No NATS, no HTTP: the machine's load moves the wall figures, much less
the CPU ones.

    uv run python -m bench.webhook_recorder --tree /tmp/before [--rounds 6 --batches 40 --tasks 64]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from psycopg import sql

from bench.common import REPO_ROOT, base_parser, machine_info, table, write_results
from bench.process_cpu import this_process_seconds
from store.log import migrate

LEASE = timedelta(seconds=20)


def deliveries_module(tree: Path, name: str) -> ModuleType:
    """``store/deliveries/records.py`` of ``tree``, imported as ``name`` (two versions side by side)."""
    spec = importlib.util.spec_from_file_location(name, tree / "store" / "deliveries.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def body() -> str:
    """A ``statusUpdate`` like the dispatcher's (quotes in it, as every JSON body has)."""
    message = {
        "role": "ROLE_AGENT",
        "parts": [{"text": 'done: "3 of 3" systems'}],
        "messageId": str(uuid.uuid4()),
    }
    status = {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T17:00:00.000Z", "message": message}
    update = {"taskId": str(uuid.uuid4()), "contextId": str(uuid.uuid4()), "status": status}
    return json.dumps({"statusUpdate": update}, separators=(",", ":"))


async def one_round(
    module: ModuleType, database_url: str, schema: str, batches: int, tasks: int
) -> dict[str, float]:
    """Record and finish ``batches`` x ``tasks`` x 2 deliveries: ms per delivery, CPU and wall."""
    recorder = module.DeliveryRecorder(database_url, schema)
    await recorder.open()
    cpu = {"record": 0.0, "finish": 0.0}
    wall = {"record": 0.0, "finish": 0.0}
    count = 0
    text = body()
    try:
        for _ in range(batches):
            now = datetime.now(UTC)
            new = [
                module.NewDelivery(
                    webhook_id=f"msg_{uuid.uuid4().hex}",
                    task_id=task_id,
                    tenant="default",
                    version=version,
                    event_type="Completed",
                    event_time=now,
                    config_id="config-1",
                    url="http://127.0.0.1:9/hook",
                    body=text,
                )
                for task_id in (uuid.uuid4() for _ in range(tasks))
                for version in (3, 4)
            ]
            began, began_cpu = time.perf_counter(), this_process_seconds()
            recorded = await recorder.record(new, datetime.now(UTC), claimant="bench", lease=LEASE)
            cpu["record"] += this_process_seconds() - began_cpu
            wall["record"] += time.perf_counter() - began
            firsts = [d for d in recorded.claimed if d.version == 3]
            seconds = [d for d in recorded.claimed if d.version == 4]
            assert len(firsts) == len(seconds) == tasks, "every lane is claimed whole"

            def attempt() -> Any:
                return module.Attempt(
                    attempt=1,
                    started_at=datetime.now(UTC),
                    duration_ms=1.5,
                    http_status=200,
                    error=None,
                    outcome="delivered",
                    dispatcher="bench",
                )

            began, began_cpu = time.perf_counter(), this_process_seconds()
            for lane, lease in ((firsts, None), (seconds, LEASE)):
                finished = await asyncio.gather(
                    *(recorder.finish(d, attempt(), state="delivered", lease=lease) for d in lane)
                )
                assert all(f.recorded and f.next is None for f in finished)
            cpu["finish"] += this_process_seconds() - began_cpu
            wall["finish"] += time.perf_counter() - began
            count += len(new)
    finally:
        await recorder.close()
    return {
        "record_cpu_ms": 1000 * cpu["record"] / count,
        "finish_cpu_ms": 1000 * cpu["finish"] / count,
        "record_wall_ms": 1000 * wall["record"] / count,
        "finish_wall_ms": 1000 * wall["finish"] / count,
    }


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    modules = {
        "baseline": deliveries_module(args.tree.resolve(), "bench_deliveries_baseline"),
        "this tree": deliveries_module(REPO_ROOT, "bench_deliveries_this_tree"),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in modules}
    for number in range(args.rounds):
        order = ["baseline", "this tree"] if number % 2 == 0 else ["this tree", "baseline"]
        for name in order:
            schema = f"bench_recorder_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                migrate(conn, schema)
            try:
                results[name].append(
                    await one_round(modules[name], args.database_url, schema, args.batches, args.tasks)
                )
            finally:
                with psycopg.connect(args.database_url, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            print(
                f"round {number + 1} {name}: "
                + ", ".join(f"{k} {v:.4f}" for k, v in results[name][-1].items())
            )
    return results


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0] if __doc__ else "webhook recorder")
    parser.add_argument(
        "--tree",
        type=Path,
        required=True,
        help="the checkout whose store/deliveries/records.py is the baseline",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds per tree, alternating")
    parser.add_argument("--batches", type=int, default=40, help="record calls per round")
    parser.add_argument("--tasks", type=int, default=64, help="tasks per batch (two deliveries each)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.batches = 2, 10
    info = machine_info(args.database_url)
    results = asyncio.run(run(args))
    medians = {
        name: {key: round(statistics.median(r[key] for r in rounds), 4) for key in rounds[0]}
        for name, rounds in results.items()
    }
    keys = list(medians["baseline"])
    print(f"\nmedians over {args.rounds} rounds each, ms per delivery ({args.tasks} tasks x 2 per batch):")
    print(table(["", *keys], [[name, *(m[k] for k in keys)] for name, m in medians.items()]))
    write_results(
        "webhook_recorder",
        {
            "machine": info,
            "tree": str(args.tree.resolve()),
            "args": vars(args) | {"tree": str(args.tree)},
            "rounds": results,
            "medians_ms_per_delivery": medians,
        },
        args,
    )


if __name__ == "__main__":
    main()
