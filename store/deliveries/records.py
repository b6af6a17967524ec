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

Longer than 500 lines on purpose: every statement on the two delivery tables, beside the one place
that composes them for a schema; split by statement, the lane and lease rules would be spread over
several files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from store.log.application import TaskApplication
from store.log.group_calls import GroupedCalls
from store.log.postgres import PostgresRunQueueRecorder

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
        self._statements: dict[str, bytes] = {}
        """The hot statements, composed once (``_composed``)."""
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
        # lane was busy (it waits behind that lane's head). The rows travel as one JSON
        # parameter (``_rows_json``): psycopg dumps nine text arrays element by element in
        # Python (escaping each body), which was most of the intake's CPU in this statement.
        statement = (
            "WITH x AS (SELECT r->>0 AS w, (r->>1)::uuid AS t, r->>2 AS tn, (r->>3)::bigint AS v,"
            " r->>4 AS et, (r->>5)::timestamptz AS tm, r->>6 AS c, r->>7 AS u, r->>8 AS b, n"
            " FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(r, n)),"
            " busy AS (SELECT DISTINCT task_id, config_id FROM {d} WHERE state = 'pending'"
            "  AND task_id IN (SELECT t FROM x)),"
            " claimed AS (SELECT x.t, x.c, min(x.n) AS first FROM x WHERE NOT EXISTS (SELECT 1 FROM busy"
            "  WHERE busy.task_id = x.t AND busy.config_id = x.c) GROUP BY x.t, x.c ORDER BY first"
            "  LIMIT %(limit)s)"
            " INSERT INTO {d} (webhook_id, task_id, tenant, version, event_type, event_time, config_id,"
            " url, body, created_at, next_attempt_at, claimed_by, claimed_until)"
            " SELECT x.w, x.t, x.tn, x.v, x.et, x.tm, x.c, x.u, x.b, %(now)s, %(now)s,"
            " CASE WHEN k.t IS NULL THEN NULL ELSE %(me)s END,"
            " CASE WHEN k.t IS NULL THEN NULL ELSE %(until)s::timestamptz END"
            " FROM x LEFT JOIN claimed k ON k.t = x.t AND k.c = x.c ORDER BY x.n"
            " ON CONFLICT DO NOTHING RETURNING id, webhook_id, claimed_by IS NOT NULL,"
            " EXISTS (SELECT 1 FROM busy WHERE busy.task_id = {d}.task_id AND busy.config_id = {d}.config_id)"
        )
        params = {
            "rows": _rows_json(deliveries),
            "limit": claim_limit,
            "now": now,
            "me": claimant,
            "until": now + lease,
        }
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(self._composed(statement, conn), params)
            rows = await cursor.fetchall()
        # What was inserted is what was given, as recorded: no need to read it back.
        given = {d.webhook_id: d for d in deliveries}
        waiting: set[tuple[UUID, str]] = set()
        claimed = []
        for row_id, webhook, is_claimed, behind in rows:
            new = given[webhook]
            if is_claimed:
                claimed.append(_recorded(new, row_id, now))
            elif behind:
                waiting.add((new.task_id, new.config_id))
        return Recorded(new=len(rows), claimed=sorted(claimed, key=lambda d: d.version), waiting=waiting)

    def _composed(self, statement: str, conn: psycopg.AsyncConnection[Any]) -> bytes:
        """``statement`` with ``{d}`` and ``{a}`` as this schema's tables, composed on first use.

        Composing is not free (the finish statement's ``SQL.format`` and ``as_bytes``), so it is
        done once per statement, not once per group on the dispatcher's event loop.
        """
        composed = self._statements.get(statement)
        if composed is None:
            query = sql.SQL(statement).format(d=self._deliveries, a=self._attempts)
            composed = self._statements[statement] = query.as_bytes(conn)
        return composed

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
        """Finish ``group`` in one statement (its own transaction), whatever its size.

        Its parts, as CTEs: ``u`` records each attempt's outcome where this dispatcher still
        holds the claim, ``a`` inserts those attempts, ``r`` keeps a retried lane's later
        deliveries out of the due scan until its head's retry, ``h``/``c`` claim the next due
        delivery of each lane that is done with its head and was given a lease. All parts see
        the table as it was before the statement, so the next delivery is the lowest pending
        version above the finished one. The rows travel as one JSON parameter (see ``record``).
        """
        first = group[0]
        lease = next((f.lease for f in group if f.lease is not None), None)
        now = max(f.now for f in group)
        rows = json.dumps(
            [
                [
                    f.delivery.id,
                    f.state,
                    f.attempt.attempt,
                    _iso(f.next_attempt_at),
                    f.attempt.http_status,
                    f.attempt.error,
                    _iso(f.attempt.started_at) if f.state != "pending" else None,
                    f.attempt.dispatcher,
                    _iso(f.attempt.started_at),
                    f.attempt.duration_ms,
                    f.attempt.outcome,
                    f.lease is not None and f.state != "pending",
                ]
                for f in group
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        columns = ", ".join(f"c.{c}" for c in _COLUMNS.split(", "))
        statement = (
            "WITH x AS (SELECT (r->>0)::bigint AS id, r->>1 AS state, (r->>2)::int AS attempts,"
            " (r->>3)::timestamptz AS next, (r->>4)::int AS status, r->>5 AS error,"
            " (r->>6)::timestamptz AS finished, r->>7 AS me, (r->>8)::timestamptz AS started,"
            " (r->>9)::float8 AS duration, r->>10 AS outcome, (r->>11)::boolean AS chain"
            " FROM jsonb_array_elements(%(rows)s::jsonb) AS e(r)),"
            " u AS (UPDATE {d} SET state = x.state, attempts = x.attempts,"
            "  next_attempt_at = coalesce(x.next, {d}.next_attempt_at), last_status = x.status,"
            "  last_error = x.error, finished_at = x.finished, claimed_by = NULL, claimed_until = NULL"
            "  FROM x WHERE {d}.id = x.id AND {d}.claimed_by = x.me"
            "  RETURNING {d}.id, {d}.task_id, {d}.config_id, {d}.version, x.state, x.next, x.chain),"
            " a AS (INSERT INTO {a} (delivery_id, attempt, started_at, duration_ms, http_status, error,"
            "  outcome, dispatcher) SELECT x.id, x.attempts, x.started, x.duration, x.status, x.error,"
            "  x.outcome, x.me FROM x JOIN u ON u.id = x.id),"
            " r AS (UPDATE {d} SET next_attempt_at = u.next FROM u WHERE u.state = 'pending'"
            "  AND u.next IS NOT NULL AND {d}.state = 'pending' AND {d}.task_id = u.task_id"
            "  AND {d}.config_id = u.config_id AND {d}.version > u.version AND {d}.next_attempt_at < u.next),"
            " h AS (SELECT DISTINCT ON (p.task_id, p.config_id) p.id FROM {d} p JOIN u"
            "  ON p.task_id = u.task_id AND p.config_id = u.config_id AND p.version > u.version"
            "  WHERE u.chain AND p.state = 'pending' ORDER BY p.task_id, p.config_id, p.version),"
            " c AS (UPDATE {d} SET claimed_by = %(me)s, claimed_until = %(until)s FROM h"
            "  WHERE {d}.id = h.id AND {d}.next_attempt_at <= %(now)s"
            "  AND ({d}.claimed_until IS NULL OR {d}.claimed_until < %(now)s)"
            "  RETURNING " + ", ".join(f"{{d}}.{c}" for c in _COLUMNS.split(", ")) + ")"
            " SELECT u.id, " + columns + " FROM u LEFT JOIN c"
            " ON c.task_id = u.task_id AND c.config_id = u.config_id"
        )
        params = {
            "rows": rows,
            "me": first.attempt.dispatcher,
            "until": now + lease if lease is not None else None,
            "now": now,
        }
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(self._composed(statement, conn), params)
            found = await cursor.fetchall()
        names = _COLUMNS.split(", ")
        recorded: set[int] = set()
        following: dict[tuple[UUID, str], Delivery] = {}
        for finished_id, *claimed in found:
            recorded.add(finished_id)
            if claimed[0] is not None:
                head = _delivery(dict(zip(names, claimed, strict=True)))
                following[head.task_id, head.config_id] = head
        return [
            Finished(
                recorded=f.delivery.id in recorded,
                next=following.get((f.delivery.task_id, f.delivery.config_id))
                if f.delivery.id in recorded
                else None,
            )
            for f in group
        ]

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


def deliveries_of(store: TaskApplication, task_id: UUID) -> list[tuple[Delivery, list[Attempt]]] | None:
    """``task_deliveries`` on a connection of ``store``'s own pool; none for a store in memory."""
    recorder = store.recorder
    if not isinstance(recorder, PostgresRunQueueRecorder):
        return None
    with recorder.datastore.get_connection() as conn:
        return task_deliveries(conn, recorder.datastore.schema, task_id)


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


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _rows_json(deliveries: Sequence[NewDelivery]) -> str:
    """The deliveries as one JSON array of rows, in the column order of ``record``'s ``x``."""
    return json.dumps(
        [
            [
                d.webhook_id,
                str(d.task_id),
                d.tenant,
                d.version,
                d.event_type,
                d.event_time.isoformat(),
                d.config_id,
                d.url,
                d.body,
            ]
            for d in deliveries
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _recorded(new: NewDelivery, row_id: int, now: datetime) -> Delivery:
    """``new`` as ``record`` inserted it (row ``row_id``, due at ``now``, not yet attempted)."""
    return Delivery(
        **vars(new),
        id=row_id,
        state="pending",
        attempts=0,
        created_at=now,
        next_attempt_at=now,
        last_status=None,
        last_error=None,
        finished_at=None,
    )


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(**row)
