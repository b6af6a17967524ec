"""``longhaul gateway`` with the listening socket made the way it was before issue 6 (no
``IPPROTO_TCP``, so asyncio leaves Nagle on): the same-run baseline of ``bench.keepalive``.

A what-if, like ``bench.instrumented_worker``: it changes the process, never the project's code.
"""

from __future__ import annotations

import socket
import sys

from longhaul import cli, serving


def _listen_without_protocol(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


if __name__ == "__main__":
    serving.listen = _listen_without_protocol
    sys.exit(cli.main(["gateway"]))
