"""The record of webhook deliveries: one row per event x push config, and every attempt at it.

Written by the dispatcher (``workers.dispatcher``) in the tables of migration 0004, beside the
log and not in any task's event stream: operators and auditors read it (``longhaul
deliveries``, ``/metrics``). A delivery is recorded before the event's NATS message is
acknowledged, so an event is never lost between the two; recording it again (a redelivered
message) changes nothing, as ``(task, config, version)`` is unique.

A *lane* is one ``(task, config)``. Its deliveries go out in version order: only a lane's oldest
pending delivery can be claimed, and a claim is a lease (``claimed_by`` until
``claimed_until``), so two dispatchers never deliver in one lane at once and a dispatcher that
died hands its lanes over when its leases end. Claims take the rows ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

DeliveryState = Literal["pending", "delivered", "gave_up", "refused"]
"""``pending`` (to be tried, or tried again), ``delivered`` (a 2xx), ``gave_up`` (the retry period
passed, or the receiver refused the request), ``refused`` (the SSRF guard refused the URL)."""

DELIVERY_STATES: tuple[DeliveryState, ...] = ("pending", "delivered", "gave_up", "refused")

DELIVERIES = "longhaul_deliveries"
ATTEMPTS = "longhaul_delivery_attempts"

_COLUMNS = (
    "id, webhook_id, task_id, tenant, version, event_type, event_time, config_id, url, body, state,"
    " attempts, created_at, next_attempt_at, last_status, last_error, finished_at"
)


@dataclass(frozen=True)
class NewDelivery:
    """A delivery to record: what to send (``body``), where, for which event."""

    webhook_id: str
    task_id: UUID
    tenant: str
    version: int
    event_type: str
    event_time: datetime
    config_id: str
    url: str
    body: str


@dataclass(frozen=True)
class Delivery:
    """A recorded delivery, as it stands."""

    id: int
    webhook_id: str
    task_id: UUID
    tenant: str
    version: int
    event_type: str
    event_time: datetime
    config_id: str
    url: str
    body: str
    state: DeliveryState
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    finished_at: datetime | None


@dataclass(frozen=True)
class Attempt:
    """One try at a delivery: when, how long, the HTTP status or the error, and what it led to."""

    attempt: int
    started_at: datetime
    duration_ms: float
    http_status: int | None
    error: str | None
    outcome: str
    """``delivered``, ``retry``, ``gave_up`` or ``refused``."""
    dispatcher: str


class DeliveryRecorder:
    """Records, claims and finishes deliveries in one schema (async, a small connection pool)."""

    def __init__(self, database_url: str, schema: str, *, pool_size: int = 4) -> None:
        self.schema = schema
        self._deliveries = sql.Identifier(schema, DELIVERIES)
        self._attempts = sql.Identifier(schema, ATTEMPTS)
        self._pool = AsyncConnectionPool(
            database_url, min_size=1, max_size=pool_size, open=False, kwargs={"autocommit": True}
        )

    async def open(self) -> None:
        """Open the pool (waits for a first connection)."""
        await self._pool.open(wait=True, timeout=10)

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    async def record(self, deliveries: Sequence[NewDelivery], now: datetime) -> int:
        """Record ``deliveries`` in one transaction (due at once); returns how many were new."""
        if not deliveries:
            return 0
        statement = sql.SQL(
            "INSERT INTO {} (webhook_id, task_id, tenant, version, event_type, event_time, config_id,"
            " url, body, created_at, next_attempt_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING"
        ).format(self._deliveries)
        rows = [
            (
                d.webhook_id,
                d.task_id,
                d.tenant,
                d.version,
                d.event_type,
                d.event_time,
                d.config_id,
                d.url,
                d.body,
                now,
                now,
            )
            for d in deliveries
        ]
        async with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(statement, rows, returning=False)
            return max(cursor.rowcount, 0)

    async def claim(self, dispatcher: str, now: datetime, lease: timedelta, limit: int) -> list[Delivery]:
        """Claim up to ``limit`` due lane heads no live claim holds, for ``lease``, soonest due first."""
        statement = sql.SQL(
            "UPDATE {d} SET claimed_by = %(me)s, claimed_until = %(until)s WHERE id IN ("
            " SELECT h.id FROM {d} h WHERE h.state = 'pending' AND h.next_attempt_at <= %(now)s"
            " AND (h.claimed_until IS NULL OR h.claimed_until < %(now)s)"
            " AND NOT EXISTS (SELECT 1 FROM {d} e WHERE e.state = 'pending' AND e.task_id = h.task_id"
            "  AND e.config_id = h.config_id AND e.version < h.version)"
            " ORDER BY h.next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
            " RETURNING " + _COLUMNS
        ).format(d=self._deliveries)
        params = {"me": dispatcher, "until": now + lease, "now": now, "limit": limit}
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statement, params)
            rows = await cursor.fetchall()
        return sorted((_delivery(row) for row in rows), key=lambda d: d.next_attempt_at)

    async def finish(
        self,
        delivery: Delivery,
        attempt: Attempt,
        *,
        state: DeliveryState,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        """Record ``attempt`` and the delivery's new state, and release the claim, in one transaction.

        A retry (``state`` pending) is due at ``next_attempt_at``, and the lane's later deliveries
        no sooner. Returns False, recording nothing, if this dispatcher no longer holds the claim.
        """
        finished = attempt.started_at if state != "pending" else None
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                sql.SQL(
                    "UPDATE {} SET state = %s, attempts = %s,"
                    " next_attempt_at = coalesce(%s, next_attempt_at), last_status = %s, last_error = %s,"
                    " finished_at = %s, claimed_by = NULL, claimed_until = NULL"
                    " WHERE id = %s AND claimed_by = %s"
                ).format(self._deliveries),
                (
                    state,
                    attempt.attempt,
                    next_attempt_at,
                    attempt.http_status,
                    attempt.error,
                    finished,
                    delivery.id,
                    attempt.dispatcher,
                ),
            )
            if cursor.rowcount != 1:
                return False
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (delivery_id, attempt, started_at, duration_ms, http_status, error,"
                    " outcome, dispatcher) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                ).format(self._attempts),
                (
                    delivery.id,
                    attempt.attempt,
                    attempt.started_at,
                    attempt.duration_ms,
                    attempt.http_status,
                    attempt.error,
                    attempt.outcome,
                    attempt.dispatcher,
                ),
            )
            if state == "pending" and next_attempt_at is not None:
                # The lane's later deliveries wait for its head: keep them out of the due scan.
                await conn.execute(
                    sql.SQL(
                        "UPDATE {} SET next_attempt_at = %s WHERE state = 'pending' AND task_id = %s"
                        " AND config_id = %s AND version > %s AND next_attempt_at < %s"
                    ).format(self._deliveries),
                    (
                        next_attempt_at,
                        delivery.task_id,
                        delivery.config_id,
                        delivery.version,
                        next_attempt_at,
                    ),
                )
        return True

    async def next_due(self) -> datetime | None:
        """When the soonest pending delivery is due (``None``: none is pending)."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                sql.SQL("SELECT min(next_attempt_at) FROM {} WHERE state = 'pending'").format(
                    self._deliveries
                )
            )
            row = await cursor.fetchone()
        return row[0] if row else None


def task_deliveries(
    conn: psycopg.Connection[Any], schema: str, task_id: UUID
) -> list[tuple[Delivery, list[Attempt]]]:
    """Every delivery of ``task_id`` (by version, then config) with its attempts, in order."""
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(
            sql.SQL("SELECT " + _COLUMNS + " FROM {} WHERE task_id = %s ORDER BY version, config_id").format(
                sql.Identifier(schema, DELIVERIES)
            ),
            (task_id,),
        )
        deliveries = [_delivery(row) for row in cursor.fetchall()]
        cursor.execute(
            sql.SQL(
                "SELECT a.delivery_id, a.attempt, a.started_at, a.duration_ms, a.http_status, a.error,"
                " a.outcome, a.dispatcher FROM {} a JOIN {} d ON d.id = a.delivery_id"
                " WHERE d.task_id = %s ORDER BY a.delivery_id, a.attempt"
            ).format(sql.Identifier(schema, ATTEMPTS), sql.Identifier(schema, DELIVERIES)),
            (task_id,),
        )
        attempts: dict[int, list[Attempt]] = {}
        for row in cursor.fetchall():
            delivery_id = row.pop("delivery_id")
            attempts.setdefault(delivery_id, []).append(Attempt(**row))
    return [(d, attempts.get(d.id, [])) for d in deliveries]


@dataclass(frozen=True)
class DeliveryCounts:
    """The deployment's webhook figures (``/metrics``)."""

    by_state: dict[str, int]
    attempts_by_outcome: dict[str, int]


def delivery_counts(cursor: Any, schema: str) -> DeliveryCounts:
    """Deliveries by state and attempts by outcome, read with ``cursor`` (dict rows)."""
    cursor.execute(
        sql.SQL("SELECT state, count(*) AS n FROM {} GROUP BY state").format(
            sql.Identifier(schema, DELIVERIES)
        )
    )
    by_state = {str(row["state"]): int(row["n"]) for row in cursor.fetchall()}
    cursor.execute(
        sql.SQL("SELECT outcome, count(*) AS n FROM {} GROUP BY outcome").format(
            sql.Identifier(schema, ATTEMPTS)
        )
    )
    attempts = {str(row["outcome"]): int(row["n"]) for row in cursor.fetchall()}
    return DeliveryCounts(by_state=by_state, attempts_by_outcome=attempts)


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(**row)
