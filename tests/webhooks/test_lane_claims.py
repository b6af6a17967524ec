"""A new lane is claimed whole when it is recorded, and what a dispatcher stops short of goes back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from store.application import TaskApplication
from store.config import StoreConfig
from store.deliveries import Attempt, DeliveryRecorder, NewDelivery

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def _new(task_id: UUID, config: str, version: int) -> NewDelivery:
    return NewDelivery(
        f"msg_{task_id}_{config}_{version}",
        task_id,
        "acme",
        version,
        "Completed",
        NOW,
        config,
        "https://example.com",
        "{}",
    )


@pytest.mark.postgres
async def test_a_new_lane_is_claimed_whole_and_a_busy_lane_not_at_all(
    store: TaskApplication, store_config: StoreConfig
) -> None:
    recorder = DeliveryRecorder(store_config.database_url, store_config.schema, pool_size=1)
    await recorder.open()
    try:
        task_id = uuid4()
        first = await recorder.record(
            [_new(task_id, "a", v) for v in (2, 3, 4)], NOW, claimant="me", lease=LEASE
        )
        assert [d.version for d in first.claimed] == [2, 3, 4]  # the whole new lane, in order
        later = await recorder.record([_new(task_id, "a", 5)], NOW, claimant="me", lease=LEASE)
        assert later.claimed == []
        assert later.waiting == {(task_id, "a")}
        # The head is retried: the dispatcher gives back the rest, which no one may claim before it.
        head, rest = first.claimed[0], first.claimed[1:]
        retry = Attempt(1, NOW, 1.0, 503, "HTTP 503", "retry", "me")
        assert await recorder.finish(head, retry, state="pending", next_attempt_at=NOW + timedelta(seconds=5))
        await recorder.release(rest, "me")
        assert await recorder.claim("other", NOW, LEASE, 10) == []  # the head is not due, the rest waits
        claimed = await recorder.claim("other", NOW + timedelta(seconds=6), LEASE, 10)
        assert [d.version for d in claimed] == [2]
        delivered = Attempt(2, NOW, 1.0, 200, None, "delivered", "other")
        finished = await recorder.finish(
            claimed[0], delivered, state="delivered", lease=LEASE, now=NOW + timedelta(seconds=6)
        )
        assert finished.next is not None
        assert finished.next.version == 3
    finally:
        await recorder.close()


@pytest.mark.postgres
async def test_claim_limit_counts_lanes_not_deliveries(
    store: TaskApplication, store_config: StoreConfig
) -> None:
    recorder = DeliveryRecorder(store_config.database_url, store_config.schema, pool_size=1)
    await recorder.open()
    try:
        one, two = uuid4(), uuid4()
        new = [_new(one, "a", 2), _new(one, "a", 3), _new(two, "a", 2), _new(two, "a", 3)]
        recorded = await recorder.record(new, NOW, claimant="me", lease=LEASE, claim_limit=1)
        assert [(d.task_id, d.version) for d in recorded.claimed] == [(one, 2), (one, 3)]
    finally:
        await recorder.close()
