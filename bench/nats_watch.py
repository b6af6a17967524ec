"""The NATS side of the stream and webhook parts: when the relay's messages arrive, and raw NATS.

A ``Watcher`` runs an asyncio loop in a thread of its own. It subscribes to a deployment's task
subjects and notes when each message arrived (by the key its ``key`` function gives), and it
measures the baseline both parts report beside their figures, at their rate and in the same run:
a core NATS publish on a plain subject to a subscriber in this process (publish -> receive), and
a JetStream publish (publish -> ack). Every time is this machine's wall clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import nats

RAW = "baseline: core NATS publish -> receive, plain subject"
JETSTREAM = "baseline: JetStream publish -> ack"


class Watcher:
    """``with Watcher(...) as watcher:`` the relay's messages noted in ``times``, and the baseline's
    latencies in ``core`` and ``jetstream`` (seconds)."""

    def __init__(
        self, nats_url: str, prefix: str, rate: float, key: Callable[[dict[str, Any]], tuple[str, Any]]
    ) -> None:
        self.nats_url, self.prefix, self.rate, self.key = nats_url, prefix, rate, key
        self.times: dict[tuple[str, Any], float] = {}
        self.core: list[float] = []
        self.jetstream: list[float] = []
        self.pinging = threading.Event()
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> Watcher:
        self.thread.start()
        if not self.ready.wait(30):
            raise TimeoutError("the benchmark's NATS subscription is not ready after 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    async def _main(self) -> None:
        client = await nats.connect(self.nats_url)

        async def relayed(msg: Any) -> None:
            self.times.setdefault(self.key(json.loads(msg.data)), time.time())

        async def pinged(msg: Any) -> None:
            self.core.append(time.time() - float(msg.data))

        await client.subscribe(f"{self.prefix}.tasks.>", cb=relayed)
        ping = f"bench.{uuid.uuid4().hex[:8]}.ping"
        await client.subscribe(ping, cb=pinged)
        js = client.jetstream()
        baseline_stream = f"BENCH_{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=baseline_stream, subjects=[f"{ping}.js"])
        await client.flush()
        self.ready.set()
        try:
            next_at = time.monotonic()
            while not self.stop.is_set():
                if not self.pinging.is_set():  # the baseline runs beside the load only
                    await asyncio.sleep(0.01)
                    next_at = time.monotonic()
                    continue
                await client.publish(ping, str(time.time()).encode())
                await client.flush()
                t0 = time.perf_counter()
                await js.publish(f"{ping}.js", b"x")
                self.jetstream.append(time.perf_counter() - t0)
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            await js.delete_stream(baseline_stream)
            await client.close()
