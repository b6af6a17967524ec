"""Fixtures of the webhook tests: a receiver, a relay and a dispatcher with short retry timings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from store.log.application import TaskApplication
from store.log.retry import webhook_retry
from store.public_form.subjects import NatsNames
from tests.support.webhooks import Receiver
from workers.dispatcher import DispatchConfig, Dispatcher
from workers.relay import Relay
from workers.webhook_signing import WebhookSigner, new_secret

FAST = DispatchConfig(
    dispatcher_id="test-dispatcher",
    policy=webhook_retry(total_s=60.0, first_delay_s=0.1, max_delay_s=0.5),
    timeout_s=2.0,
    concurrency=16,
    allow_private=True,
)
"""Retries from 50-100 ms up to 250-500 ms, for a minute; the receiver is on loopback."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    yield running
    running.stop()


@pytest.fixture
def names(nats_url: str, nats_names: tuple[str, str]) -> NatsNames:
    return NatsNames(url=nats_url, stream=nats_names[0], subject_prefix=nats_names[1])


@pytest.fixture
def secret() -> str:
    return new_secret()


Run = Callable[..., contextlib.AbstractAsyncContextManager[Dispatcher]]


@pytest.fixture
def dispatching(store: TaskApplication, names: NatsNames, secret: str) -> Run:
    """``async with dispatching(**config changes) as dispatcher``: a relay and a dispatcher run."""

    @contextlib.asynccontextmanager
    async def run(**changes: Any) -> AsyncIterator[Dispatcher]:
        dispatcher = Dispatcher(
            store=store,
            names=names,
            signer=WebhookSigner(default=secret),
            config=replace(FAST, **changes),
            clock=lambda: datetime.now(UTC),
        )
        stop = asyncio.Event()
        running = asyncio.gather(Relay(store=store, names=names).run(stop), dispatcher.run(stop))
        try:
            yield dispatcher
        finally:
            stop.set()
            await running

    return run


async def eventually(check: Callable[[], bool], within: float = 20.0, message: str = "") -> None:
    """Wait until ``check()`` holds, failing after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {within}s: {message}", pytrace=False)
        await asyncio.sleep(0.05)
