"""What a task feed costs on NATS: a core subscription against a JetStream ordered consumer.

For each of ``--rounds`` tasks: set up the subscription to the task's subjects (core: ``SUB`` and
a flush; JetStream: an ordered push consumer starting at the stream's next sequence), publish
one event with ``js.publish`` as the relay does, and time set-up and publish → callback; then
tear the subscription down. The two kinds alternate, on one connection to the local NATS.

    uv run python -m bench.feed_setup [--quick] [--rounds 300]
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from bench.common import base_parser, machine_info, summary_ms, table, write_results


async def run(url: str, rounds: int) -> dict[str, dict[str, list[float]]]:
    client = await nats.connect(url)
    js = client.jetstream()
    token = uuid.uuid4().hex[:10]
    stream, prefix = f"BENCH_FEED_{token}", f"benchfeed{token}"
    await js.add_stream(name=stream, subjects=[f"{prefix}.>"])
    results: dict[str, dict[str, list[float]]] = {
        kind: {"setup": [], "delivery": []} for kind in ("core", "ordered consumer")
    }
    try:
        for i in range(rounds):
            for kind in results:
                subject = f"{prefix}.tasks.t.{uuid.uuid4()}.Completed"
                arrived = asyncio.Event()
                received: list[float] = []

                async def on_message(
                    _: Msg, arrived: asyncio.Event = arrived, received: list[float] = received
                ) -> None:
                    received.append(time.perf_counter())
                    arrived.set()

                started = time.perf_counter()
                if kind == "core":
                    subscription = await client.subscribe(subject, cb=on_message)
                    await client.flush()
                else:
                    info = await js.stream_info(stream)
                    config = ConsumerConfig(
                        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=info.state.last_seq + 1
                    )
                    subscription = await js.subscribe(
                        subject, stream=stream, ordered_consumer=True, config=config, cb=on_message
                    )
                set_up = time.perf_counter()
                published = time.perf_counter()
                await js.publish(subject, b'{"version": 2}', headers={"Nats-Msg-Id": f"{stream}:{i}:{kind}"})
                await asyncio.wait_for(arrived.wait(), 10)
                await subscription.unsubscribe()
                if i >= 10:  # warm-up
                    results[kind]["setup"].append(set_up - started)
                    results[kind]["delivery"].append(received[0] - published)
    finally:
        await js.delete_stream(stream)
        await client.close()
    return results


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--nats-url", default=os.environ.get("LONGHAUL_NATS_URL", "nats://127.0.0.1:4222"))
    args = parser.parse_args()
    if args.quick:
        args.rounds = 60
    results = asyncio.run(run(args.nats_url, args.rounds))
    rows = []
    payload: dict[str, Any] = {"machine": machine_info(args.database_url), "rounds": args.rounds}
    for kind, measured in results.items():
        setup, delivery = summary_ms(measured["setup"]), summary_ms(measured["delivery"])
        payload[kind] = {"setup": setup, "delivery": delivery}
        rows.append(
            [
                kind,
                f"{setup['median_ms']:.2f}",
                f"{setup['p95_ms']:.2f}",
                f"{delivery['median_ms']:.2f}",
                f"{delivery['p95_ms']:.2f}",
            ]
        )
    print(table(["subscription", "set-up p50 ms", "p95", "publish → callback p50 ms", "p95"], rows))
    write_results("feed_setup", payload, args)


if __name__ == "__main__":
    main()
