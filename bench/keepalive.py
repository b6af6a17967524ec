"""Keep-alive request latency: ``SendMessage`` on one reused connection, as SDK clients send it.

Two gateways over one schema, one worker and one relay: the project's ``longhaul gateway`` and the same
gateway with its socket made as before issue 6 (``bench.delayed_ack_gateway``: no TCP_NODELAY on
accepted connections, so each response waits for the client's delayed ACK). Rounds alternate
between the two (interleaved), one client (c=1), echo skill, ``returnImmediately`` and blocking.
Besides latency it reports each gateway process's CPU time (user + system) per request.

    uv run python -m bench.keepalive            [--quick] [--requests 200 --rounds 5]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    REPO_ROOT,
    base_parser,
    free_port,
    fresh_schema,
    machine_info,
    stream_deleted,
    summary_ms,
    table,
    write_results,
)
from bench.process_cpu import tree_cpu_seconds
from bench.processes import WorkerProcess, worker_env

VARIANTS = {"longhaul": ["longhaul.cli", "gateway"], "before (no TCP_NODELAY)": ["bench.delayed_ack_gateway"]}
BASELINE_TREE = "tree at --baseline-tree"


def start_process(
    module: list[str], env: dict[str, str], log: Path, *, tree: Path = REPO_ROOT
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *module],
            env={**env, "PYTHONPATH": str(tree)},
            cwd=tree,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_gateway(
    module: list[str], env: dict[str, str], port: int, log: Path, *, tree: Path = REPO_ROOT
) -> subprocess.Popen[bytes]:
    process = start_process(module, {**env, "LONGHAUL_PORT": str(port)}, log, tree=tree)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=1).raise_for_status()
            return process
        except httpx.HTTPError:
            if process.poll() is not None:
                raise RuntimeError(log.read_text()) from None
            time.sleep(0.1)
    raise TimeoutError(log.read_text())


def one_round(client: httpx.Client, requests: int, *, immediately: bool) -> list[float]:
    timings = []
    for _ in range(requests):
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "parts": [{"text": "ping"}],
                    "metadata": {"skill": "echo"},
                },
                "configuration": {"returnImmediately": immediately},
            },
        }
        started = time.perf_counter()
        response = client.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
        timings.append(time.perf_counter() - started)
        response.raise_for_status()
        assert "result" in response.json(), response.text
    return timings


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--requests", type=int, default=200, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per gateway and mode")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run `longhaul gateway` from this checkout (e.g. a worktree of an older commit)",
    )
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 50, 2
    variants = {name: (module, REPO_ROOT) for name, module in VARIANTS.items()}
    if args.baseline_tree is not None:
        variants[BASELINE_TREE] = (["longhaul.cli", "gateway"], args.baseline_tree.resolve())
    folder = Path(tempfile.mkdtemp(prefix="bench-keepalive-"))
    results: dict[str, dict[str, list[float]]] = {
        v: {"returnImmediately": [], "blocking": []} for v in variants
    }
    cpu_s: dict[str, dict[str, float]] = {v: {"returnImmediately": 0.0, "blocking": 0.0} for v in variants}
    nats_url = os.environ.get("LONGHAUL_NATS_URL", "nats://127.0.0.1:4222")
    with (
        fresh_schema(args.database_url, "keepalive") as schema,
        stream_deleted(nats_url, f"BENCH_{schema}") as stream,
    ):
        env = worker_env(args.database_url, schema, concurrency=8, lease_seconds=30)
        env["LONGHAUL_NATS_URL"] = nats_url
        env["LONGHAUL_NATS_STREAM"] = stream
        env["LONGHAUL_NATS_SUBJECT_PREFIX"] = f"bench{schema}"
        worker = WorkerProcess(env, folder / "worker.log")
        worker.wait_started()
        relay = start_process(["longhaul.cli", "relay"], env, folder / "relay.log")
        ports = {variant: free_port() for variant in variants}
        gateways = {
            variant: start_gateway(module, env, ports[variant], folder / f"gateway{i}.log", tree=tree)
            for i, (variant, (module, tree)) in enumerate(variants.items())
        }
        try:
            clients = {v: httpx.Client(base_url=f"http://127.0.0.1:{ports[v]}", timeout=30) for v in variants}
            for _ in range(args.rounds):
                for mode in ("returnImmediately", "blocking"):
                    for variant, client in clients.items():  # interleaved: every round visits each
                        one_round(client, 5, immediately=mode == "returnImmediately")  # warm the connection
                        cpu_before = tree_cpu_seconds(gateways[variant].pid)
                        results[variant][mode] += one_round(
                            client, args.requests, immediately=mode == "returnImmediately"
                        )
                        cpu_s[variant][mode] += tree_cpu_seconds(gateways[variant].pid) - cpu_before
            for client in clients.values():
                client.close()
        finally:
            for gateway in gateways.values():
                gateway.terminate()
                gateway.wait(20)
            worker.stop()
            relay.terminate()
            relay.wait(20)
    rows = []
    payload: dict[str, Any] = {
        "machine": machine_info(args.database_url),
        "requests": args.requests,
        "rounds": args.rounds,
        "baseline_tree": str(args.baseline_tree) if args.baseline_tree else None,
    }
    for mode in ("returnImmediately", "blocking"):
        ours = statistics.median(results["longhaul"][mode])
        for variant in variants:
            s = summary_ms(results[variant][mode])
            ratio = statistics.median(results[variant][mode]) / ours
            rows.append(
                [
                    mode,
                    variant,
                    f"{s['median_ms']:.1f}",
                    f"{s['p95_ms']:.1f}",
                    f"{1000 / s['mean_ms']:.0f}",
                    f"{ratio:.2f}x",
                    f"{1000 * cpu_s[variant][mode] / len(results[variant][mode]):.2f}",
                ]
            )
        payload[mode] = {v: summary_ms(results[v][mode]) for v in variants}
        payload[mode]["gateway_cpu_ms_per_request"] = {
            v: 1000 * cpu_s[v][mode] / len(results[v][mode]) for v in variants
        }
        payload[mode]["p50_ratio_to_longhaul"] = {
            v: statistics.median(results[v][mode]) / ours for v in variants
        }
    print(
        table(
            ["mode", "gateway", "p50 ms", "p95 ms", "req/s", "p50 / longhaul's", "gateway CPU ms/req"], rows
        )
    )
    write_results("keepalive", payload, args)


if __name__ == "__main__":
    main()
