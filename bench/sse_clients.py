"""One client process of ``bench.sse_latency``: follows a share of the tasks' SSE streams.

Run by the benchmark (``python -m bench.sse_clients REQUEST``), never by hand. The request is
JSON, ``{"base": URL, "tenant": T, "tasks": [task id, ...], "open_at_once": K}``. It opens one
``SubscribeToTask`` stream per task (at most K opening at once: the opening is not what is
measured, and a burst of 1,000 opens would meet the gateway's in-flight limit), and notes when
each frame was parsed (``time.time()``, the same clock as the parent's commit times). It writes a
line ``{"ready": n}`` on stdout once every stream has sent its first frame (the snapshot), then,
when every stream has ended (the parent completed the tasks), a line ``{"received": [[task,
version, at], ...], "errors": [...]}``, and exits.

Several of these share the streams so that the client side is not the bottleneck of a run with
1,000 streams (one Python process parsing every frame of 1,000 httpx streams could be).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx
import uvloop

from api.sse import read_events

OPEN_RETRY_S = 0.2
"""Pause before retrying an open the gateway refused with 429 (it is busy opening others)."""


async def follow(
    client: httpx.AsyncClient,
    task_id: str,
    tenant: str,
    opening: asyncio.Semaphore,
    opened: asyncio.Event,
    received: list[tuple[str, int, float]],
) -> None:
    """Follow one task's stream until it ends, noting when each frame arrived."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SubscribeToTask",
        "params": {"id": task_id, "tenant": tenant},
    }
    await opening.acquire()
    try:
        while True:
            async with client.stream(
                "POST", "/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"}
            ) as response:
                if response.status_code == httpx.codes.TOO_MANY_REQUESTS:
                    await asyncio.sleep(OPEN_RETRY_S)
                    continue
                response.raise_for_status()
                async for event in read_events(response.aiter_lines()):
                    if event.id is None:
                        continue
                    received.append((task_id, event.id, time.time()))
                    if not opened.is_set():  # its first frame: the next stream may open
                        opening.release()
                        opened.set()
                return
    finally:
        if not opened.is_set():
            opening.release()


async def run(request: dict[str, Any]) -> dict[str, Any]:
    """Open the streams, say when all are open, gather every frame's arrival until they end."""
    tasks: list[str] = request["tasks"]
    received: list[tuple[str, int, float]] = []
    opening = asyncio.Semaphore(int(request.get("open_at_once", 50)))
    events = [asyncio.Event() for _ in tasks]
    limits = httpx.Limits(max_connections=len(tasks) + 4, max_keepalive_connections=len(tasks) + 4)
    errors: list[str] = []
    async with httpx.AsyncClient(base_url=request["base"], limits=limits, timeout=120) as client:
        readers = [
            asyncio.ensure_future(follow(client, task, request["tenant"], opening, opened, received))
            for task, opened in zip(tasks, events, strict=True)
        ]
        while not all(event.is_set() for event in events):
            failed = next((r for r in readers if r.done() and r.exception() is not None), None)
            if failed is not None:
                print(json.dumps({"ready": 0, "error": repr(failed.exception())}), flush=True)
                break
            await asyncio.sleep(0.05)
        else:
            print(json.dumps({"ready": len(tasks)}), flush=True)
        for result in await asyncio.gather(*readers, return_exceptions=True):
            if isinstance(result, BaseException):
                errors.append(repr(result))
    return {"received": received, "errors": errors}


if __name__ == "__main__":
    result = uvloop.run(run(json.loads(sys.argv[1])))
    print(json.dumps(result), flush=True)
