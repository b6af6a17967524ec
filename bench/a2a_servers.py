"""The servers ``bench.a2a_compare`` starts, each its own process, and the order a round visits them.

- ``longhaul``: ``longhaul up`` on the machine's PostgreSQL (a fresh schema) and NATS, echo skill;
- ``longhaul-base``: the same from another checkout (``--baseline-tree``), for an A/B;
- ``sdk-memory``: ``bench.a2a_sdk_server`` with the SDK's ``InMemoryTaskStore``;
- ``sdk-postgres``: the same with the SDK's ``DatabaseTaskStore`` (asyncpg) in a fresh schema.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.common import REPO_ROOT, delete_stream, free_port, fresh_schema
from bench.keepalive import start_gateway
from bench.processes import worker_env

SERVERS = ("longhaul", "sdk-memory", "sdk-postgres")


@contextmanager
def servers(
    names: list[str],
    database_url: str,
    folder: Path,
    worker_concurrency: int,
    baseline_tree: Path | None = None,
    settings: dict[str, dict[str, str]] | None = None,
    up_module: str = "longhaul.cli",
) -> Iterator[dict[str, tuple[str, int]]]:
    """Start the servers named; yields each one's base URL and process id; stops them and drops
    their schemas.

    ``longhaul-base`` is ``longhaul up`` run from ``baseline_tree`` (another checkout), for an
    interleaved A/B of two longhaul versions in the same run. ``settings`` are extra environment
    variables by server name (``longhaul``, ``longhaul-base``): ``LONGHAUL_*`` settings, or a
    traced ``up``'s ``BENCH_*`` ones. ``up_module`` is the module both run as ``python -m <it>
    up`` (``bench.traced_up``: ``up`` with hop marks); a server given ``BENCH_WHATIF`` runs as
    ``bench.traced_up`` whatever ``up_module`` says (the what-if is applied there).
    """
    with ExitStack() as stack:
        urls: dict[str, tuple[str, int]] = {}
        for name in names:
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
            tree = baseline_tree if name == "longhaul-base" and baseline_tree is not None else REPO_ROOT
            if name in {"longhaul", "longhaul-base"}:
                schema = stack.enter_context(fresh_schema(database_url, "compare"))
                env = worker_env(database_url, schema, concurrency=worker_concurrency, lease_seconds=30)
                env["LONGHAUL_NATS_URL"] = os.environ.get("LONGHAUL_NATS_URL", "nats://127.0.0.1:4222")
                env["LONGHAUL_NATS_STREAM"] = f"BENCH_{schema}"
                stack.callback(delete_stream, env["LONGHAUL_NATS_URL"], env["LONGHAUL_NATS_STREAM"])
                env["LONGHAUL_NATS_SUBJECT_PREFIX"] = f"bench{schema}"
                env["LONGHAUL_DATA_DIR"] = str(folder / name)
                env |= (settings or {}).get(name, {})
                module = ["bench.traced_up" if "BENCH_WHATIF" in env else up_module, "up"]
            else:
                store = name.removeprefix("sdk-")
                module = ["bench.a2a_sdk_server", "--port", str(port), "--store", store]
                if store == "postgres":
                    schema = stack.enter_context(fresh_schema(database_url, "sdk"))
                    module += ["--database-url", database_url, "--schema", schema]
            process = start_gateway(module, env, port, folder / f"{name}.log", tree=tree)
            stack.callback(stop, process)
            urls[name] = (f"http://127.0.0.1:{port}", process.pid)
        yield urls


def round_order(
    urls: dict[str, tuple[str, int]], number: int, *, fixed: bool = False
) -> list[tuple[str, tuple[str, int]]]:
    """The servers in the order round ``number`` (from 0) visits them: interleaved, every round
    visits each server, and every other round in the reverse order, so that no server always runs
    right after the same one (whose background work may still be running on the same cores)."""
    order = list(urls.items())
    return order[::-1] if number % 2 and not fixed else order


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def settings_of(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs (``--longhaul-env``, ``--baseline-env``) as environment variables."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("LONGHAUL_"):
            raise SystemExit(f"not a LONGHAUL_KEY=VALUE pair: {pair!r}")
        env[key] = value
    return env
