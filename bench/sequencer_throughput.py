"""Sequencer throughput: how fast the sequencer makes a backlog of events leaves of the Merkle log.

A backlog of ``--events`` events (tasks submitted and leased, as the relay benchmark makes them)
is sequenced from an empty Merkle log by ``workers.sequencer.Sequencer`` (leaves, subtrees and
position written per batch, one checkpoint signed at the end), in rounds interleaved with the
same-run baseline: the relay publishing the same backlog to a fresh JetStream stream (the other
follower of the log, on the same ``LogFollower`` machinery). Reported: events/s and the CPU
seconds of this process per 1,000 events (``bench.process_cpu.this_process_seconds``, every
thread), medians over the rounds, and the ratio sequencer / relay.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from bench.common import base_parser, delete_stream, fresh_schema, machine_info, table, write_results
from bench.process_cpu import this_process_seconds
from bench.relay_throughput import DEFAULT_NATS_URL, _backlog, _names
from store.evidence import CHECKPOINTS_TABLE, LEAVES_TABLE, NODES_TABLE, POSITION_TABLE, SignerKey
from store.log import StoreConfig, TaskApplication
from store.public_form import NatsNames
from workers.relay import Relay
from workers.sequencer import Sequencer


def _reset_merkle_log(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for table_name in (LEAVES_TABLE, NODES_TABLE, CHECKPOINTS_TABLE, POSITION_TABLE):
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema, table_name)))


async def _timed(run: Any, done: Any) -> tuple[float, float]:
    """Wall and CPU seconds from the start of ``run(stop)`` until ``done()``; then it is stopped."""
    stop = asyncio.Event()
    wall, cpu = time.perf_counter(), this_process_seconds()
    running = asyncio.ensure_future(run(stop))
    while not done():
        await asyncio.sleep(0.005)
        if running.done():
            await running
            raise RuntimeError("stopped early")
    wall, cpu = time.perf_counter() - wall, this_process_seconds() - cpu
    stop.set()
    await running
    return wall, cpu


async def sequence(store: TaskApplication, nats_url: str, events: int) -> tuple[float, float]:
    names = _names(nats_url)
    signer = SignerKey.generate("longhaul/bench")
    sequencer = Sequencer(
        store=store, names=names, signer=signer, clock=lambda: datetime.now(UTC), interval=3600
    )
    try:
        return await _timed(sequencer.run, lambda: sequencer.sequenced >= events)
    finally:
        delete_stream(names.url, names.checkpoint_stream)


async def relay(store: TaskApplication, nats_url: str, events: int) -> tuple[float, float]:
    names: NatsNames = _names(nats_url)
    publisher = Relay(store=store, names=names)
    try:
        return await _timed(publisher.run, lambda: publisher.published >= events)
    finally:
        delete_stream(names.url, names.stream)


async def main_async(args: Any) -> dict[str, Any]:
    rows: dict[str, list[tuple[float, float]]] = {"sequencer": [], "relay": []}
    with fresh_schema(args.database_url, "sequencer") as schema:
        store = TaskApplication(StoreConfig(database_url=args.database_url, schema=schema))
        try:
            await asyncio.to_thread(_backlog, store, args.events)
            for round_ in range(args.rounds):
                order = ["sequencer", "relay"] if round_ % 2 == 0 else ["relay", "sequencer"]
                for name in order:
                    if name == "sequencer":
                        _reset_merkle_log(args.database_url, schema)
                        wall, cpu = await sequence(store, args.nats_url, args.events)
                    else:
                        wall, cpu = await relay(store, args.nats_url, args.events)
                    rows[name].append((wall, cpu))
                    print(
                        f"{name}: {args.events / wall:,.0f} events/s, {cpu / args.events * 1000:.3f} CPU s"
                        " per 1,000 events",
                        flush=True,
                    )
        finally:
            store.close()
    results: dict[str, Any] = {}
    for name, measured in rows.items():
        results[name] = {
            "events_per_s": [round(args.events / wall) for wall, _ in measured],
            "events_per_s_median": round(statistics.median(args.events / wall for wall, _ in measured)),
            "cpu_s_per_1000_median": round(
                statistics.median(cpu / args.events * 1000 for _, cpu in measured), 4
            ),
        }
    results["ratio_sequencer_to_relay"] = {
        "events_per_s": round(
            results["sequencer"]["events_per_s_median"] / results["relay"]["events_per_s_median"], 3
        ),
        "cpu": round(
            results["sequencer"]["cpu_s_per_1000_median"] / results["relay"]["cpu_s_per_1000_median"], 3
        ),
    }
    return results


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--nats-url", default=os.environ.get("LONGHAUL_TEST_NATS_URL", DEFAULT_NATS_URL))
    parser.add_argument("--events", type=int, help="backlog size (default 20,000; 4,000 with --quick)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (3; 1 with --quick)")
    args = parser.parse_args()
    args.events = args.events or (4_000 if args.quick else 20_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    info = machine_info(args.database_url)
    results = asyncio.run(main_async(args))
    print()
    print(
        table(
            ["follower", "events/s (median)", "CPU s / 1,000 events"],
            [
                [name, f"{results[name]['events_per_s_median']:,}", results[name]["cpu_s_per_1000_median"]]
                for name in ("sequencer", "relay")
            ],
        )
    )
    print(f"sequencer / relay: {results['ratio_sequencer_to_relay']}")
    write_results("sequencer_throughput", {"machine": info, "args": vars(args), "results": results}, args)


if __name__ == "__main__":
    main()
