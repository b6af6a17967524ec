"""Files by reference: a 1 GiB ``big-file`` through ``longhaul up``, uploaded and downloaded with curl.

One ``longhaul up`` (file store: a directory under its data dir, in the system's temporary
directory, on the same disk as the baselines' files). Figures:

- **write**: ``big-file`` of ``SIZE`` bytes (256 MiB chunks) from submit to completed. Its content
  (SHA-256 digests) is made by the skill itself, so beside it: the same content made in this
  process alone, the bound of any writer of it;
- **upload** (``POST /a2a/files`` with ``curl -T``) and **download** (every part of the task's
  artifact, with ``curl``), each beside ``cp`` of the same bytes on the same disk (the best of 3);
- the resident memory of ``up``'s process tree, sampled every 50 ms, above its idle figure;
- ``GetTask`` of the 1 GiB task beside ``GetTask`` of an echo task (median of 200 each).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.a2a_servers import servers
from bench.common import Options, table
from bench.process_cpu import tree
from workers.skills.big_file import content

SIZE, QUICK_SIZE = 1 << 30, 64 << 20
MIB = 1 << 20


class PeakMemory(threading.Thread):
    """The largest resident memory of a process and its children while the block runs."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, sum(p.memory_info().rss for p in tree(self.pid) if p.is_running()))

    def __enter__(self) -> PeakMemory:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join()


def rpc(base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, Any] = httpx.post(f"{base}/a2a/jsonrpc", json=body, timeout=120).json()["result"]
    return answer


def finished(base: str, skill: str, data: dict[str, Any]) -> dict[str, Any]:
    """Send a message to ``skill`` and poll ``GetTask`` until the task ends."""
    parts = [{"text": "go"}, {"data": data}]
    message = {
        "role": "ROLE_USER",
        "messageId": str(time.time_ns()),
        "parts": parts,
        "metadata": {"skill": skill},
    }
    sent = rpc(base, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    task: dict[str, Any] = sent["task"]
    while task["status"]["state"] not in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"):
        time.sleep(0.2)
        task = rpc(base, "GetTask", {"id": task["id"], "historyLength": 0})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    return task


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def get_task_ms(base: str, task_id: str, count: int = 200) -> float:
    with httpx.Client(timeout=30) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        times = []
        for _ in range(count):
            started = time.perf_counter()
            http.post(f"{base}/a2a/jsonrpc", json=body).raise_for_status()
            times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def run(options: Options) -> dict[str, Any]:
    """The write, upload, download and GetTask figures, each beside its baseline: the results."""
    size = QUICK_SIZE if options.quick else SIZE
    with tempfile.TemporaryDirectory() as tmp, servers(["longhaul"], options, Path(tmp)) as urls:
        folder, (base, pid) = Path(tmp), urls["longhaul"]
        source = folder / "content.bin"
        started = time.perf_counter()
        with source.open("wb") as file:  # the content made here alone: the bound of any writer of it
            for at in range(0, size, MIB):
                file.write(content(1, at, min(size, at + MIB)))
        make_s = time.perf_counter() - started
        cp_s = min(timed(["cp", str(source), str(folder / f"copy-{n}.bin")]) for n in range(3))
        echo = finished(base, "echo", {})
        with PeakMemory(pid) as idle:
            time.sleep(1.0)
        with PeakMemory(pid) as writing:
            started = time.perf_counter()
            task = finished(base, "big-file", {"bytes": size, "seed": 1})
            write_s = time.perf_counter() - started
        to_null = [arg for part in task["artifacts"][0]["parts"] for arg in (part["url"], "-o", "/dev/null")]
        with PeakMemory(pid) as reading:
            download_s = timed(["curl", "-sSf", *to_null])  # every part of the artifact
            upload_s = timed(["curl", "-sSf", "-T", str(source), "-X", "POST", f"{base}/a2a/files"])
        get_big, get_echo = get_task_ms(base, task["id"]), get_task_ms(base, echo["id"])
    mib = size / MIB
    results = {
        "bytes": size,
        "content_made_alone_mib_s": round(mib / make_s, 1),
        "cp_mib_s": round(mib / cp_s, 1),
        "write_mib_s": round(mib / write_s, 1),
        "upload_mib_s": round(mib / upload_s, 1),
        "download_mib_s": round(mib / download_s, 1),
        "idle_rss_mb": round(idle.peak / 1e6, 1),
        "peak_above_idle_mb": {
            "write": round((writing.peak - idle.peak) / 1e6, 1),
            "download_upload": round((reading.peak - idle.peak) / 1e6, 1),
        },
        "get_task_ms": {"big_file": get_big, "echo": get_echo},
    }
    rows = [
        [
            "write (big-file)",
            results["write_mib_s"],
            f"content made alone {results['content_made_alone_mib_s']}",
        ],
        ["upload (curl -T)", results["upload_mib_s"], f"cp {results['cp_mib_s']}"],
        ["download (curl)", results["download_mib_s"], f"cp {results['cp_mib_s']}"],
    ]
    print(table(["path", "MiB/s", "baseline MiB/s"], rows))
    print(json.dumps({k: results[k] for k in ("idle_rss_mb", "peak_above_idle_mb", "get_task_ms")}))
    return results
