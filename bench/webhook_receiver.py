"""The webhook receiver of the webhook part (``bench.webhook_latency``), in a process of its own.

It answers each POST from a uvloop event loop of its own with a bare HTTP/1.1 protocol: the
request's headers split once, its body read to ``Content-Length``, the time noted, the 200
written, and only then the update parsed and kept. A receiver's own time is in every delivery
lane's next POST (each waits for the 2xx before it), so it is kept small here.

It prints its port on the first line of stdout; ``GET /count`` says how many updates arrived,
``GET /arrivals`` lists them (``[task id, state, epoch seconds]``), each the first arrival of
its task and state.

    uv run python -m bench.webhook_receiver
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import uvloop

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class Arrivals:
    """The first arrival time of each (task id, state) of a ``statusUpdate``."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, str], float] = {}

    def add(self, body: bytes, at: float) -> None:
        update = json.loads(body).get("statusUpdate")
        if update is not None:
            self.times.setdefault((update["taskId"], update["status"]["state"]), at)

    def answer(self, target: bytes) -> bytes:
        """The response to ``GET target``."""
        if target == b"/count":
            payload = json.dumps(len(self.times)).encode()
        elif target == b"/arrivals":
            payload = json.dumps([[task, state, at] for (task, state), at in self.times.items()]).encode()
        else:
            return NOT_FOUND
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        return head.encode() + payload


class Receiver(asyncio.Protocol):
    """One keep-alive connection: requests in order, each answered as soon as its body is in."""

    def __init__(self, arrivals: Arrivals) -> None:
        self.arrivals = arrivals
        self.buffer = b""
        self.transport: Any = None
        """The connection's transport (uvloop's is no ``asyncio.Transport`` subclass)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            start = end + 4
            if len(self.buffer) < start + length:
                return
            body, self.buffer = self.buffer[start : start + length], self.buffer[start + length :]
            method, target, *_ = head[0].split(b" ")
            if method == b"POST":
                at = time.time()
                self.transport.write(OK)
                self.arrivals.add(body, at)
            else:
                self.transport.write(self.arrivals.answer(target))


async def serve() -> None:
    """Serve on a free loopback port until killed (``SIGTERM``)."""
    arrivals = Arrivals()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Receiver(arrivals), "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve())
