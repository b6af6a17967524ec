"""The NATS side of the stream and webhook parts: a relayed log, when its messages arrive, raw NATS.

``relayed`` gives a fresh schema and JetStream stream, a store that commits into them and a
``longhaul relay`` process that publishes the log, all gone at the end.

A ``Watcher`` runs an asyncio loop in a thread of its own. It subscribes to a deployment's task
subjects and notes when each message arrived (by the key its ``key`` function gives), and it
measures the baseline both parts report beside their figures, at their rate and in the same run:
a core NATS publish on a plain subject to a subscriber in this process (publish -> receive), and
a JetStream publish (publish -> ack). Every time is this machine's wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.common import Options, fresh_schema, longhaul_env, running, stream_deleted, summary_ms, table
from store.log import StoreConfig, TaskApplication

TO_NATS = "commit -> NATS (the relay's message)"
RAW = "baseline: core NATS publish -> receive, plain subject"
JETSTREAM = "baseline: JetStream publish -> ack"
WARMUP_S = 2.0
"""The first seconds of a load are left out of its latencies."""


@dataclass(frozen=True)
class Deployment:
    store: TaskApplication
    env: dict[str, str]
    """The environment of a ``longhaul`` process of this deployment."""
    logs: Path
    prefix: str
    """The deployment's NATS subject prefix."""


@contextmanager
def relayed(options: Options, name: str, pool_size: int, **settings: Any) -> Iterator[Deployment]:
    """A fresh schema and stream, a store on them, a ``longhaul relay`` (``settings``: more of the
    deployment's settings); all stopped and dropped at the end."""
    token = uuid.uuid4().hex[:8]
    stream, prefix = f"BENCH_{name.upper()}_{token}", f"bench{name}{token}"
    logs = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    with stream_deleted(options.nats_url, stream), fresh_schema(options.database_url, name) as schema:
        store = TaskApplication(StoreConfig(options.database_url, schema=schema, pool_size=pool_size))
        env = longhaul_env(
            options.database_url,
            schema,
            nats_url=options.nats_url,
            nats_stream=stream,
            nats_subject_prefix=prefix,
            **settings,
        )
        with contextlib.closing(store), running("relay", env, logs / "relay.log"):
            yield Deployment(store, env, logs, prefix)


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


def latencies(
    committed: dict[Any, float],
    relayed: dict[Any, float],
    arrived: dict[Any, float],
    names: tuple[str, str],
    watcher: Watcher,
) -> dict[str, dict[str, float]]:
    """Printed and returned: commit -> NATS, commit -> arrival and NATS -> arrival (``names``: the
    last two's) of what was committed after the warm-up, and the raw NATS baseline."""
    start = min(committed.values()) + WARMUP_S
    warm = {key: at for key, at in committed.items() if at >= start}
    headline, hop = names
    rows = {
        TO_NATS: summary_ms([relayed[k] - at for k, at in warm.items() if k in relayed]),
        headline: summary_ms([arrived[k] - at for k, at in warm.items() if k in arrived]),
        hop: summary_ms([arrived[k] - relayed[k] for k in warm if k in arrived and k in relayed]),
        RAW: summary_ms(watcher.core),
        JETSTREAM: summary_ms(watcher.jetstream),
    }
    print(table(["path", "n", "p50 ms", "p99 ms", "max ms"], [[k, *v.values()] for k, v in rows.items()]))
    return rows
