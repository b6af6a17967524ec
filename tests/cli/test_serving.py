"""How ``longhaul`` processes serve: sockets that answer keep-alive requests without stalls, and
a shutdown that stops the services a draining step still calls only after the step is done."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from longhaul import serving as serving_module
from longhaul.demo import fake_iam
from longhaul.serving import HTTP_KEEPALIVE_S, listen, run_all, serve


class _Probe(asyncio.Protocol):
    """Reads ``TCP_NODELAY`` off every connection asyncio accepts for the server."""

    seen: asyncio.Queue[int]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        self.seen.put_nowait(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        transport.close()


async def test_accepted_connections_have_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY on accepted sockets only if the listening socket names IPPROTO_TCP."""
    sock = listen("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    seen: asyncio.Queue[int] = asyncio.Queue()
    _Probe.seen = seen
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Probe, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        nodelay = await asyncio.wait_for(seen.get(), 5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert nodelay != 0


async def test_keep_alive_requests_do_not_wait_for_a_delayed_ack() -> None:
    """Sequential requests on one connection: each well under the 40 ms delayed-ACK stall."""
    sock = listen("127.0.0.1", 0)
    stop = asyncio.Event()
    serving = asyncio.ensure_future(serve(fake_iam.create_app(), sock, stop))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            await _until_serving(client)
            for _ in range(3):  # warm up the connection and the app
                (await client.get("/health")).raise_for_status()
            timings = []
            for _ in range(15):
                started = time.perf_counter()
                response = await client.get("/health")
                timings.append(time.perf_counter() - started)
                response.raise_for_status()
    finally:
        stop.set()
        await serving
    timings.sort()
    assert timings[len(timings) // 2] < 0.025, f"median {timings[len(timings) // 2] * 1000:.1f} ms"


HTTPX_KEEPALIVE_S = 5.0
"""httpx's own ``keepalive_expiry``: a connection idle this long is the client's to close, not ours."""

SCALED_KEEPALIVE_S = 0.4
"""``HTTP_KEEPALIVE_S`` for the served test: the same setting, at a scale a unit test can wait out."""


def test_the_gateway_keeps_an_idle_connection_longer_than_clients_keep_theirs() -> None:
    """The gateway must not close an idle connection while a client still reuses it (ADR 0035)."""
    assert HTTPX_KEEPALIVE_S < HTTP_KEEPALIVE_S


async def test_an_idle_keep_alive_connection_lives_as_long_as_the_keep_alive_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``serve`` gives uvicorn is what an idle connection gets: reused before, closed after.

    With ``HTTP_KEEPALIVE_S`` scaled down, a request after half of it idle is answered on the same
    connection, and the gateway closes the connection only once all of it has passed (with
    uvicorn's default of 5 s in effect instead, the close would come late and the test fail).
    """
    monkeypatch.setattr(serving_module, "HTTP_KEEPALIVE_S", SCALED_KEEPALIVE_S)
    sock = listen("127.0.0.1", 0)
    stop = asyncio.Event()
    serving = asyncio.ensure_future(serve(fake_iam.create_app(), sock, stop))
    request = b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"
    loop = asyncio.get_running_loop()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            await _until_serving(client)
        reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        answers = []
        for _ in range(2):
            asked = loop.time()  # the gateway's idle timer starts after this, at its answer
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = int(
                next(
                    line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
                ).split(b":")[1]
            )
            await reader.readexactly(length)
            answers.append(head.split(b"\r\n")[0])
            await asyncio.sleep(SCALED_KEEPALIVE_S / 2)  # idle, but less than the setting
        closed = await asyncio.wait_for(reader.read(), 3)  # b"" once the gateway closes it
        lived = loop.time() - asked
        writer.close()
    finally:
        stop.set()
        await serving
    assert answers == [b"HTTP/1.1 200 OK"] * 2
    assert closed == b""
    assert SCALED_KEEPALIVE_S <= lived < SCALED_KEEPALIVE_S + 2, lived


async def _until_serving(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            (await client.get("/health")).raise_for_status()
            return
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


async def test_services_a_step_calls_stop_after_the_workers_drained() -> None:
    """The fake IAM must still answer a step that commits during the drain after SIGTERM."""
    iam_sock = listen("127.0.0.1", 0)
    iam_url = f"http://127.0.0.1:{iam_sock.getsockname()[1]}"
    stop, dependencies_stop = asyncio.Event(), asyncio.Event()
    answers: list[int] = []

    async def draining_worker() -> None:
        await stop.wait()
        await asyncio.sleep(0.3)  # the step finishes during the grace period, then calls the IAM
        async with httpx.AsyncClient(base_url=iam_url) as client:
            answers.append((await client.get("/health")).status_code)

    async def stop_soon() -> None:
        await asyncio.sleep(0.2)
        stop.set()

    await asyncio.wait_for(
        run_all(
            [draining_worker(), stop_soon()],
            stop,
            dependencies=[serve(fake_iam.create_app(), iam_sock, dependencies_stop)],
            dependencies_stop=dependencies_stop,
        ),
        20,
    )
    assert answers == [200]
    assert dependencies_stop.is_set()
