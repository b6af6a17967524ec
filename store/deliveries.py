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

from store.group_calls import GroupedCalls

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
class Delivery(NewDelivery):
    """A recorded delivery, as it stands: what was recorded, and how far its attempts got."""

    id: int
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


MAX_GROUP = 256
"""The most finished attempts recorded in one transaction."""


@dataclass
class _Finishing:
    """A finished attempt waiting for the group transaction that records it."""

    delivery: Delivery
    attempt: Attempt
    state: DeliveryState
    next_attempt_at: datetime | None
    lease: timedelta | None
    now: datetime

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclass(frozen=True)
class Recorded:
    """What ``DeliveryRecorder.record`` did: how many deliveries were new, which it claimed."""

    new: int
    claimed: list[Delivery]
    waiting: set[tuple[UUID, str]]
    """Lanes whose new deliveries wait behind one that was pending when they were recorded."""


@dataclass(frozen=True)
class Finished:
    """What ``DeliveryRecorder.finish`` did: whether it recorded, and the lane's next delivery it claimed."""

    recorded: bool
    next: Delivery | None

    def __bool__(self) -> bool:
        return self.recorded


class DeliveryRecorder:
    """Records, claims and finishes deliveries in one schema (async, a small connection pool)."""

    def __init__(self, database_url: str, schema: str, *, pool_size: int = 4) -> None:
        self.schema = schema
        self._deliveries = sql.Identifier(schema, DELIVERIES)
        self._attempts = sql.Identifier(schema, ATTEMPTS)
        self._finishing: GroupedCalls[_Finishing, Finished] = GroupedCalls(self._finish_group, MAX_GROUP)
        self._pool = AsyncConnectionPool(
            database_url, min_size=1, max_size=pool_size, open=False, kwargs={"autocommit": True}
        )

    async def open(self) -> None:
        """Open the pool (waits for a first connection)."""
        await self._pool.open(wait=True, timeout=10)

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()

    async def record(
        self,
        deliveries: Sequence[NewDelivery],
        now: datetime,
        *,
        claimant: str,
        lease: timedelta,
        claim_limit: int | None = None,
    ) -> Recorded:
        """Record ``deliveries`` in one transaction, due at once.

        The new deliveries of each lane with no pending delivery yet are claimed for ``claimant``
        in the same insert (up to ``claim_limit`` lanes, oldest first), so that they can go out
        at once, one after the other, without a claim query; the others are left for any
        dispatcher's claim. A claimant that stops before the end of a lane it claimed so gives
        the rest back (``release``).
        Only the dispatcher that leads the intake records (``workers.dispatcher``): no one else
        adds to a lane meanwhile.
        """
        if not deliveries:
            return Recorded(new=0, claimed=[], waiting=set())
        # One statement, so one round trip and its own commit: the lanes that already have a
        # pending delivery (``busy``, as the statement's snapshot sees the table), the other
        # lanes in order of their first new delivery (the first ``claim_limit`` are claimed,
        # every new delivery of theirs with them), the insert, and whether each inserted row's
        # lane was busy (it waits behind that lane's head).
        statement = sql.SQL(
            "WITH x AS (SELECT * FROM unnest(%(w)s::text[], %(t)s::uuid[], %(tn)s::text[], %(v)s::bigint[],"
            " %(et)s::text[], %(tm)s::timestamptz[], %(c)s::text[], %(u)s::text[], %(b)s::text[])"
            " WITH ORDINALITY AS x(w, t, tn, v, et, tm, c, u, b, n)),"
            " busy AS (SELECT DISTINCT task_id, config_id FROM {d} WHERE state = 'pending'"
            "  AND task_id = ANY(%(t)s::uuid[])),"
            " claimed AS (SELECT x.t, x.c, min(x.n) AS first FROM x WHERE NOT EXISTS (SELECT 1 FROM busy"
            "  WHERE busy.task_id = x.t AND busy.config_id = x.c) GROUP BY x.t, x.c ORDER BY first"
            "  LIMIT %(limit)s)"
            " INSERT INTO {d} (webhook_id, task_id, tenant, version, event_type, event_time, config_id,"
            " url, body, created_at, next_attempt_at, claimed_by, claimed_until)"
            " SELECT x.w, x.t, x.tn, x.v, x.et, x.tm, x.c, x.u, x.b, %(now)s, %(now)s,"
            " CASE WHEN k.t IS NULL THEN NULL ELSE %(me)s END,"
            " CASE WHEN k.t IS NULL THEN NULL ELSE %(until)s::timestamptz END"
            " FROM x LEFT JOIN claimed k ON k.t = x.t AND k.c = x.c ORDER BY x.n"
            " ON CONFLICT DO NOTHING RETURNING " + _COLUMNS + ", claimed_by,"
            " EXISTS (SELECT 1 FROM busy WHERE busy.task_id = {d}.task_id AND busy.config_id = {d}.config_id)"
        ).format(d=self._deliveries)
        w, t, tn, v, et, tm, c, u, b = (
            list(column) for column in zip(*map(_insert_row, deliveries), strict=True)
        )
        params = {
            "w": w, "t": t, "tn": tn, "v": v, "et": et, "tm": tm, "c": c, "u": u, "b": b,
            "limit": claim_limit, "now": now, "me": claimant, "until": now + lease,
        }  # fmt: skip
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(statement, params)
            rows = await cursor.fetchall()
        names = [*_COLUMNS.split(", "), "claimed_by", "behind"]
        inserted = [dict(zip(names, row, strict=True)) for row in rows]
        waiting = {(r["task_id"], r["config_id"]) for r in inserted if not r["claimed_by"] and r["behind"]}
        claimed = [
            _delivery({k: v for k, v in r.items() if k not in {"claimed_by", "behind"}})
            for r in inserted
            if r["claimed_by"]
        ]
        return Recorded(new=len(inserted), claimed=sorted(claimed, key=lambda d: d.version), waiting=waiting)

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
        lease: timedelta | None = None,
        now: datetime | None = None,
    ) -> Finished:
        """Record ``attempt`` and the delivery's new state, and release the claim.

        A retry (``state`` pending) is due at ``next_attempt_at``, and the lane's later deliveries
        no sooner. When the delivery is done and ``lease`` is given, the lane's next delivery, if
        one is due, is claimed in the same transaction (``Finished.next``). Records nothing (and
        ``Finished.recorded`` is False) if this dispatcher no longer holds the claim. Finishes
        that wait at the same time share one transaction (a group commit). ``now`` (default: when
        the attempt started) decides which next deliveries are due and when the new claim ends.
        """
        finishing = _Finishing(delivery, attempt, state, next_attempt_at, lease, now or attempt.started_at)
        return await self._finishing.call(finishing)

    async def _finish_group(self, group: list[_Finishing]) -> list[Finished]:
        """Finish ``group`` in one transaction: four set-based statements, whatever its size."""
        d = self._deliveries
        async with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.execute(
                sql.SQL(
                    "UPDATE {d} SET state = x.state, attempts = x.attempts,"
                    " next_attempt_at = coalesce(x.next, {d}.next_attempt_at), last_status = x.status,"
                    " last_error = x.error, finished_at = x.finished, claimed_by = NULL, claimed_until = NULL"
                    " FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::timestamptz[], %s::int[],"
                    " %s::text[], %s::timestamptz[], %s::text[])"
                    " AS x(id, state, attempts, next, status, error, finished, me)"
                    " WHERE {d}.id = x.id AND {d}.claimed_by = x.me RETURNING {d}.id"
                ).format(d=d),
                _columns(
                    (
                        f.delivery.id,
                        f.state,
                        f.attempt.attempt,
                        f.next_attempt_at,
                        f.attempt.http_status,
                        f.attempt.error,
                        f.attempt.started_at if f.state != "pending" else None,
                        f.attempt.dispatcher,
                    )
                    for f in group
                ),
            )
            recorded = {row[0] for row in await cursor.fetchall()}
            done = [f for f in group if f.delivery.id in recorded]
            if not done:
                return [Finished(recorded=False, next=None) for _ in group]
            await cursor.execute(
                sql.SQL(
                    "INSERT INTO {} (delivery_id, attempt, started_at, duration_ms, http_status, error,"
                    " outcome, dispatcher) SELECT * FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[],"
                    " %s::float8[], %s::int[], %s::text[], %s::text[], %s::text[])"
                ).format(self._attempts),
                _columns(
                    (
                        f.delivery.id,
                        f.attempt.attempt,
                        f.attempt.started_at,
                        f.attempt.duration_ms,
                        f.attempt.http_status,
                        f.attempt.error,
                        f.attempt.outcome,
                        f.attempt.dispatcher,
                    )
                    for f in done
                ),
            )
            retried = [f for f in done if f.state == "pending" and f.next_attempt_at is not None]
            if retried:
                # The lane's later deliveries wait for its head: keep them out of the due scan.
                await cursor.execute(
                    sql.SQL(
                        "UPDATE {d} SET next_attempt_at = x.next FROM unnest(%s::uuid[], %s::text[],"
                        " %s::bigint[], %s::timestamptz[]) AS x(task, config, version, next)"
                        " WHERE {d}.state = 'pending' AND {d}.task_id = x.task AND {d}.config_id = x.config"
                        " AND {d}.version > x.version AND {d}.next_attempt_at < x.next"
                    ).format(d=d),
                    _columns(
                        (f.delivery.task_id, f.delivery.config_id, f.delivery.version, f.next_attempt_at)
                        for f in retried
                    ),
                )
            chained = [f for f in done if f.state != "pending" and f.lease is not None]
            following: dict[tuple[UUID, str], Delivery] = {}
            if chained:
                following = await self._claim_next(cursor, chained)
        return [
            Finished(
                recorded=f.delivery.id in recorded,
                next=following.get((f.delivery.task_id, f.delivery.config_id)) if f in chained else None,
            )
            for f in group
        ]

    async def _claim_next(self, cursor: Any, chained: list[_Finishing]) -> dict[tuple[UUID, str], Delivery]:
        """Claim the next due delivery of each finished lane (no row lock waits: see ``claim``)."""
        first = chained[0]
        assert first.lease is not None
        lanes = [(f.delivery.task_id, f.delivery.config_id) for f in chained]
        now = max(f.now for f in chained)
        return await _claim_heads(cursor, self._deliveries, lanes, first.attempt.dispatcher, now, first.lease)

    async def claim_lanes(
        self, lanes: Sequence[tuple[UUID, str]], dispatcher: str, now: datetime, lease: timedelta
    ) -> list[Delivery]:
        """Claim the head of each of ``lanes`` that is due and unclaimed."""
        if not lanes:
            return []
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            heads = await _claim_heads(cursor, self._deliveries, lanes, dispatcher, now, lease)
        return list(heads.values())

    async def release(self, deliveries: Sequence[Delivery], dispatcher: str) -> None:
        """Give back the claims ``dispatcher`` holds on ``deliveries`` (a lane it stopped short in)."""
        if not deliveries:
            return
        async with self._pool.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "UPDATE {} SET claimed_by = NULL, claimed_until = NULL"
                    " WHERE id = ANY(%s) AND claimed_by = %s AND state = 'pending'"
                ).format(self._deliveries),
                ([d.id for d in deliveries], dispatcher),
            )

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


async def _claim_heads(
    cursor: Any,
    table: sql.Identifier,
    lanes: Sequence[tuple[UUID, str]],
    dispatcher: str,
    now: datetime,
    lease: timedelta,
) -> dict[tuple[UUID, str], Delivery]:
    """Claim the oldest pending delivery of each lane if it is due and no live claim holds it.

    Two claimers of one row: the second's update waits for the first and then finds the claim
    live, so it claims nothing (the row's conditions are checked again after the wait).
    """
    await cursor.execute(
        sql.SQL(
            "UPDATE {d} SET claimed_by = %s, claimed_until = %s FROM ("
            " SELECT DISTINCT ON (p.task_id, p.config_id) p.id FROM {d} p"
            " JOIN unnest(%s::uuid[], %s::text[]) AS x(task, config) ON p.task_id = x.task"
            " AND p.config_id = x.config WHERE p.state = 'pending'"
            " ORDER BY p.task_id, p.config_id, p.version) AS h"
            " WHERE {d}.id = h.id AND {d}.next_attempt_at <= %s"
            " AND ({d}.claimed_until IS NULL OR {d}.claimed_until < %s)"
            " RETURNING " + ", ".join(f"{{d}}.{c}" for c in _COLUMNS.split(", "))
        ).format(d=table),
        (dispatcher, now + lease, [lane[0] for lane in lanes], [lane[1] for lane in lanes], now, now),
    )
    names = _COLUMNS.split(", ")
    rows = [_delivery(dict(zip(names, row, strict=True))) for row in await cursor.fetchall()]
    return {(r.task_id, r.config_id): r for r in rows}


def _columns(rows: Any) -> tuple[list[Any], ...]:
    """Rows as one list per column (the arrays an ``unnest`` insert or update takes)."""
    listed = list(rows)
    return tuple(list(column) for column in zip(*listed, strict=True))


def _insert_row(delivery: NewDelivery) -> tuple[Any, ...]:
    d = delivery
    return (
        d.webhook_id,
        d.task_id,
        d.tenant,
        d.version,
        d.event_type,
        d.event_time,
        d.config_id,
        d.url,
        d.body,
    )


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(**row)
