"""``tests/support/nats_servers.py``: a node keeps its port and JetStream data across a kill.

Clusters (``NatsCluster``) are exercised by ``tests/crash/test_nats_cluster.py``.
"""

from __future__ import annotations

from pathlib import Path

import nats
from nats.js.api import StreamConfig

from tests.support.nats_servers import NatsServer


async def test_a_killed_server_restarts_with_its_port_and_its_stream(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats").start()
    try:
        url = server.url
        client = await nats.connect(url, max_reconnect_attempts=0)
        js = client.jetstream()
        await js.add_stream(StreamConfig(name="KEPT", subjects=["kept.>"]))
        await js.publish("kept.one", b"1")
        await client.close()

        server.kill()
        assert not server.alive()
        server.restart()

        assert server.url == url
        client = await nats.connect(url, max_reconnect_attempts=0)
        info = await client.jetstream().stream_info("KEPT")
        await client.close()
        assert info.state.messages == 1
    finally:
        server.stop()
