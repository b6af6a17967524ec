"""Serving an ASGI app: the listening socket, the uvicorn server, the stop event, running parts together.

Every long-running command stops on SIGINT/SIGTERM (``stop_event``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any

import uvicorn

from longhaul.errors import CommandError

HTTP_SHUTDOWN_GRACE_S = 5
"""On stop, open HTTP requests (a blocking SendMessage, say) get this long before they are cut."""
HTTP_KEEPALIVE_S = 75
"""How long an idle keep-alive connection stays open: longer than clients keep theirs (httpx 5 s,
aiohttp 15 s), so that a client never sends on a connection the gateway is closing at the same
moment (uvicorn's default, 5 s, races httpx's 5 s: a reset request at 128 clients, ADR 0035)."""


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to us (we stop it with ``should_exit``)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def stop_event() -> asyncio.Event:
    """An event set on SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def listen(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so the app can name its real port (``port`` 0: any).

    The protocol is named (``IPPROTO_TCP``): asyncio sets ``TCP_NODELAY`` on accepted connections
    only when the listening socket says it is TCP, and without it every request on a keep-alive
    connection waits about 40 ms for the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return sock


async def serve(app: Any, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve ``app`` on ``sock`` until ``stop``; in-flight requests get a short grace period."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        log_config=None,  # uvicorn's records go to the root logger: one format (longhaul/logs.py)
        access_log=False,
        http="httptools",  # a C parser, not h11's pure Python one: less CPU per request (ADR 0045)
        proxy_headers=False,  # nothing reads the client's address or scheme: no X-Forwarded-* pass
        timeout_graceful_shutdown=HTTP_SHUTDOWN_GRACE_S,
        timeout_keep_alive=HTTP_KEEPALIVE_S,
    )
    server = _QuietServer(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    server.should_exit = True
    await serving
    sock.close()


async def run_all(
    parts: list[Awaitable[None]],
    stop: asyncio.Event,
    *,
    dependencies: Sequence[Awaitable[None]] = (),
    dependencies_stop: asyncio.Event | None = None,
) -> None:
    """Run ``parts`` until ``stop``; if one fails, stop the others and re-raise.

    ``dependencies`` are services the parts call (the fake IAM a step talks to). They run until
    every part has finished, draining workers included, and only then are stopped through
    ``dependencies_stop``: a step that commits during the drain still reaches them.
    """
    services = [asyncio.ensure_future(d) for d in dependencies]
    tasks = [asyncio.ensure_future(p) for p in parts]
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([*tasks, *services, stopper], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    if dependencies_stop is not None:
        dependencies_stop.set()
    results += await asyncio.gather(*services, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
