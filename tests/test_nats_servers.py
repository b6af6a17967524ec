"""``tests/support/nats_servers.py``: a node keeps its port and JetStream data across a kill; a
cluster whose port was taken before its node bound it starts on other ports, and a start that
fails leaves no node running.

Clusters under failure (``NatsCluster``) are exercised by ``tests/crash/test_nats_cluster.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from tests.support.nats_servers import NatsCluster, NatsServer


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


def test_a_cluster_whose_port_was_taken_starts_on_other_ports(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "nats", size=3)
    taken = cluster.node("n2").cluster_port
    assert taken is not None
    with socket.socket() as squatter:  # the race, made certain: n2's route port is taken
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with cluster:
            assert cluster.node("n2").cluster_port != taken
            assert len(cluster.alive()) == 3
            assert cluster.meta_leader() is not None
        assert cluster.alive() == []


def test_a_cluster_that_cannot_start_leaves_no_node_running(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "nats", size=3)
    started = list(cluster.nodes)
    (tmp_path / "nats" / "n3").mkdir(parents=True)
    (tmp_path / "nats" / "n3" / "store").write_text("a file where n3's store folder must be")
    with pytest.raises(AssertionError, match="n3"):
        cluster.start()
    assert [node for node in started if node.alive()] == []
    assert cluster.alive() == []
