"""NATS stopped and started again under a running gateway, worker and relay: nothing lost or repeated.

The test runs a nats-server of its own (the machine's NATS is shared) and stops it, with SIGTERM
and then with SIGKILL, while blocking SendMessage calls are in flight and new ones arrive. The
gateway's connection reconnects forever and its task feed polls the log while NATS is away and
reads what it missed after the reconnect, so every call answers, even during the outage; the
relay starts over from its saved position once NATS is back, so the stream holds every
committed event once, in log-position order.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from longhaul.settings import Settings
from store.log.application import TaskApplication
from tests.crash.cluster import Cluster, rpc, user_message
from tests.support.jetstream import (
    log_events,
    relayed_exactly_once,
    stream_messages,
    wait_for_stream,
)
from tests.support.nats_servers import NatsServer
from tests.support.processes import wait_until

JSON = dict[str, Any]

MAX_OUTAGE_S = 10.0
CALLS = 4


def _blocking(base: str, skill: str, params: JSON | None = None) -> JSON:
    message = {**user_message(params), "metadata": {"skill": skill}}
    return rpc(base, "SendMessage", {"message": message}, timeout=60)


def _state(response: JSON) -> str:
    assert "result" in response, response
    state: str = response["result"]["task"]["status"]["state"]
    return state


def _outage(nats_server: NatsServer, base: str, stop_signal: signal.Signals) -> list[JSON]:
    """Stop NATS with ``stop_signal`` while calls are in flight and new ones come; start it again.

    Returns the answers, all given while NATS was away (each within a fallback poll of the log).
    """
    with ThreadPoolExecutor(max_workers=2 * CALLS) as pool:
        # In flight when NATS goes: their tasks complete while it is away.
        in_flight = [pool.submit(_blocking, base, "crash-sleeper", {"sleep_s": 1.0}) for _ in range(CALLS)]
        time.sleep(0.5)
        nats_server.kill() if stop_signal is signal.SIGKILL else nats_server.stop()
        during: list[Future[JSON]] = [pool.submit(_blocking, base, "crash-noop") for _ in range(CALLS)]
        _, not_done = wait(in_flight + during, timeout=MAX_OUTAGE_S)
        nats_server.start()
        assert not not_done, f"{len(not_done)} blocking calls did not answer while NATS was down"
        return [f.result() for f in in_flight + during]


def test_nats_restarts_lose_no_answer_and_no_event(
    settings: Settings, tmp_path: Path, store: TaskApplication, own_nats: NatsServer
) -> None:
    own = settings.model_copy(update={"nats_url": own_nats.url})
    cluster = Cluster(own, tmp_path)
    try:
        cluster.worker()
        cluster.start(["relay"])
        base = cluster.gateway()
        before = [_blocking(base, "crash-noop") for _ in range(CALLS)]
        stopped = _outage(own_nats, base, signal.SIGTERM)  # a clean stop
        between = [_blocking(base, "crash-noop") for _ in range(CALLS)]
        killed = _outage(own_nats, base, signal.SIGKILL)  # and a crash
        after = [_blocking(base, "crash-noop") for _ in range(CALLS)]

        gateway = next(p for p in cluster.processes if p.args[0] == "gateway")
        wait_until(lambda: gateway.log().count("NATS reconnected") >= 2, 10, "the gateway to reconnect twice")

        answers = before + stopped + between + killed + after
        assert [_state(r) for r in answers] == ["TASK_STATE_COMPLETED"] * len(answers)

        # The relay is back and has published everything, each event once, in log order.
        total = len(log_events(store))
        wait_for_stream(own_nats.url, own.nats_stream, total, timeout=60)
        time.sleep(0.5)  # a relay that republished what the stream holds would show it now
        messages = stream_messages(own_nats.url, own.nats_stream, f"{own.nats_subject_prefix}.tasks.>")
        relayed_exactly_once(messages, store, own.nats_stream)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop_all()
