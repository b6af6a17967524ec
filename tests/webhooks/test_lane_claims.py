"""A new lane is claimed whole when it is recorded, and what a dispatcher stops short of goes back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import psycopg
import pytest

from store.deliveries.records import Attempt, DeliveryRecorder, NewDelivery, task_deliveries
from store.log.application import TaskApplication
from store.log.config import StoreConfig

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


@pytest.mark.postgres
async def test_what_record_returns_is_what_it_stored(
    store: TaskApplication, store_config: StoreConfig
) -> None:
    """The claimed deliveries are built from what was given, not read back: they must equal the rows."""
    recorder = DeliveryRecorder(store_config.database_url, store_config.schema, pool_size=1)
    await recorder.open()
    try:
        task_id = uuid4()
        body = '{"statusUpdate":{"text":"quotes \\" and \\\\ and ünïcode, a tab\\t"}}'
        new = [
            NewDelivery(
                f"msg_{task_id}_{v}", task_id, "acme", v, "Completed", NOW, "a", "https://example.com", body
            )
            for v in (2, 3)
        ]
        recorded = await recorder.record(new, NOW, claimant="me", lease=LEASE)
    finally:
        await recorder.close()
    with psycopg.connect(store_config.database_url) as conn:
        stored = [delivery for delivery, _ in task_deliveries(conn, store_config.schema, task_id)]
    assert recorded.claimed == stored
    assert stored[0].body == body


@pytest.mark.postgres
async def test_a_group_of_finishes_is_recorded_in_one_statement(
    store: TaskApplication, store_config: StoreConfig
) -> None:
    """Finishes that wait together: each lane's outcome, attempt, retry pushback and next claim."""
    recorder = DeliveryRecorder(store_config.database_url, store_config.schema, pool_size=1)
    await recorder.open()
    try:
        done, retried, lost = uuid4(), uuid4(), uuid4()
        recorded = await recorder.record(
            [_new(t, "a", v) for t in (done, retried, lost) for v in (2, 3)],
            NOW,
            claimant="me",
            lease=LEASE,
            claim_limit=0,  # nothing claimed by the insert: the heads are claimed below
        )
        assert recorded.new == 6
        heads = {d.task_id: d for d in await recorder.claim("me", NOW, LEASE, 10)}
        assert {d.version for d in heads.values()} == {2}
        # The third lane's head goes to another dispatcher meanwhile.
        await recorder.release([heads[lost]], "me")
        [taken] = await recorder.claim("other", NOW, LEASE, 10)
        assert (taken.task_id, taken.version) == (lost, 2)
        later = NOW + timedelta(seconds=1)
        retry_at = later + timedelta(seconds=30)
        results = await asyncio.gather(
            recorder.finish(
                heads[done], Attempt(1, later, 2.0, 200, None, "delivered", "me"), state="delivered",
                lease=LEASE, now=later,
            ),
            recorder.finish(
                heads[retried], Attempt(1, later, 2.0, 503, "HTTP 503", "retry", "me"), state="pending",
                next_attempt_at=retry_at, now=later,
            ),
            recorder.finish(
                heads[lost], Attempt(1, later, 2.0, 200, None, "delivered", "me"), state="delivered",
                lease=LEASE, now=later,
            ),
        )  # fmt: skip
    finally:
        await recorder.close()
    assert [r.recorded for r in results] == [True, True, False]
    assert results[0].next is not None
    assert (results[0].next.task_id, results[0].next.version) == (done, 3)  # the lane's next, claimed
    assert results[1].next is None
    assert results[2].next is None
    with psycopg.connect(store_config.database_url) as conn:
        rows = {t: task_deliveries(conn, store_config.schema, t) for t in (done, retried, lost)}
    (head, attempts), (following, _) = rows[done]
    assert (head.state, head.attempts, head.last_status, head.finished_at) == ("delivered", 1, 200, later)
    assert [(a.attempt, a.outcome, a.http_status, a.dispatcher) for a in attempts] == [
        (1, "delivered", 200, "me")
    ]
    assert following.state == "pending"
    (head, attempts), (following, _) = rows[retried]
    assert (head.state, head.next_attempt_at, head.last_error, head.finished_at) == (
        "pending",
        retry_at,
        "HTTP 503",
        None,
    )
    assert [a.outcome for a in attempts] == ["retry"]
    assert following.next_attempt_at == retry_at  # kept out of the due scan until its head's retry
    (head, attempts), _ = rows[lost]
    assert (head.state, attempts) == ("pending", [])  # the claim was another's: nothing recorded
