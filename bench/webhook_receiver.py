"""A webhook receiver in a process of its own, on aiohttp: ``bench.webhook_latency --receiver process``.

The threaded receiver runs in the benchmark process, beside the four committing threads and the
NATS watcher, under one GIL: a POST can wait there for the interpreter. This one answers each
POST from an event loop of its own and notes when the update arrived (the wall clock, as the
benchmark's). It prints its port on the first line of stdout; ``GET /count`` says how many
updates arrived, ``GET /arrivals`` lists them (``[task id, state, epoch seconds]``).

    uv run python -m bench.webhook_receiver
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

from aiohttp import web


def application() -> web.Application:
    """The receiver's routes, its arrivals kept in the application."""
    arrivals: dict[tuple[str, str], float] = {}

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        at = time.time()
        update = json.loads(body).get("statusUpdate")
        if update is not None:
            arrivals.setdefault((update["taskId"], update["status"]["state"]), at)
        return web.Response(status=200)

    async def count(_: web.Request) -> web.Response:
        return web.json_response(len(arrivals))

    async def listed(_: web.Request) -> web.Response:
        return web.json_response([[task, state, at] for (task, state), at in arrivals.items()])

    app = web.Application()
    app.add_routes([web.post("/hook", hook), web.get("/count", count), web.get("/arrivals", listed)])
    return app


async def serve() -> None:
    """Serve on a free loopback port until SIGTERM."""
    runner = web.AppRunner(application(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    server = site._server  # aiohttp keeps the bound socket there only
    assert isinstance(server, asyncio.Server)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve())
