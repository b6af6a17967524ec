"""The receiver of docs/webhooks.md verifies real deliveries and refuses forged ones."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from store.log.application import TaskApplication
from tests.support.webhooks import finished_task
from tests.webhooks.conftest import Run, eventually

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 1, "docs/webhooks.md has one Python example"
    return str(blocks[0])


@pytest.fixture
def example(secret: str) -> Iterator[tuple[dict[str, Any], str]]:
    """The example's module namespace with this test's secret and token, serving on a free port."""
    namespace: dict[str, Any] = {"__name__": "webhook_example"}
    exec(compile(_example(), str(DOC), "exec"), namespace)
    namespace["SECRET"], namespace["TOKEN"] = secret, "tok-1"
    server = ThreadingHTTPServer(("127.0.0.1", 0), namespace["Receiver"])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield namespace, f"http://127.0.0.1:{server.server_address[1]}/a2a"
    server.shutdown()
    server.server_close()


async def test_the_documented_receiver_verifies_deliveries_and_refuses_forgeries(
    store: TaskApplication, dispatching: Run, example: tuple[dict[str, Any], str]
) -> None:
    namespace, url = example
    finished_task(store, url, artifacts=1)
    async with dispatching():
        await eventually(lambda: len(namespace["seen"]) >= 3, message="the example took 3 deliveries")
    assert len(namespace["seen"]) == 3
    forged = {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,AAAA"}
    async with httpx.AsyncClient() as client:
        answer = await client.post(url, content=b'{"statusUpdate": {}}', headers=forged)
    assert answer.status_code == 401
    assert len(namespace["seen"]) == 3
