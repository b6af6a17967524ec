"""``longhaul tail``: live task events from NATS, one line each. An example analytics consumer.

It reads only what ``docs/events.md`` documents (the stream, the subjects and the message JSON),
through an ordered JetStream consumer: ephemeral (nothing is left on the server when it stops),
without acks, in stream order, recreated by nats-py after a gap. A consumer of your own can start
from this one: subscribe to ``<prefix>.tasks.<tenant>.<task id>.<EventType>`` with wildcards, and
de-duplicate by ``position``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import stat
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO
from uuid import UUID

import nats
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from pydantic import TypeAdapter, ValidationError

from store.public_form import NatsNames, subject_token

IDLE_S = 0.5
"""How long to wait for a message before looking whether stdout's reader is still there."""
BODY_CHARS = 100
"""A readable line shows at most this much of the event's body."""
NATS_CONNECT_S = 10.0


@dataclass(frozen=True)
class Start:
    """Where the consumer starts: new messages only (the default), all kept ones, or a time."""

    from_start: bool = False
    since: datetime | None = None


def parse_since(text: str) -> datetime:
    """``--since``: a time (ISO 8601, ``2026-12-01T10:00:00Z``) or a duration ago (``PT1H``, ``600``)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        pass
    else:
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        ago = TypeAdapter(timedelta).validate_python(float(text) if _is_number(text) else text)
    except ValidationError:
        raise ValueError(f"{text!r} is neither a time (2026-12-01T10:00:00Z) nor a duration (PT1H)") from None
    return datetime.now(UTC) - ago


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def filter_subject(names: NatsNames, tenant: str | None, task_id: UUID | None) -> str:
    """``<prefix>.tasks.<tenant token>.<task id>.*``, with ``*`` for what is not filtered."""
    tenant_token = subject_token(tenant) if tenant is not None else "*"
    task_token = str(task_id) if task_id is not None else "*"
    return f"{names.subject_prefix}.tasks.{tenant_token}.{task_token}.*"


def line(message: dict[str, Any]) -> str:
    """One event, readably: time, tenant, task, version, type and the start of its body."""
    if message.get("body") is None and "bodyOmitted" in message:
        body = f"(body omitted: {message['bodyOmitted']})"
    else:
        body = json.dumps(message.get("body"), separators=(", ", ": "))
    if len(body) > BODY_CHARS:
        body = body[: BODY_CHARS - 1] + "…"
    return (
        f"{message.get('time')}  {message.get('tenant')}  {message.get('taskId')}"
        f"  v{message.get('version')!s:<4} {message.get('type')!s:<22} {body}"
    )


def _reader_left(out: TextIO) -> bool:
    """Whether ``out`` is a pipe whose reader closed it (``longhaul tail | head -3`` after 3 lines).

    Checked while no event comes, so that ``tail`` piped into ``head`` ends without waiting for
    one more event to fail to write. A closed pipe reports POLLERR on its write end.
    """
    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except (OSError, ValueError):  # no file descriptor (a StringIO in tests)
        return False
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


async def tail(
    names: NatsNames,
    stop: asyncio.Event,
    *,
    tenant: str | None = None,
    task_id: UUID | None = None,
    start: Start = Start(),
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """Print the deployment's events as they arrive, until ``stop``; returns how many it printed.

    Raises ``LookupError`` when the stream does not exist, ``BrokenPipeError`` when ``out``'s
    reader went away.
    """
    out = out or sys.stdout
    nc = await asyncio.wait_for(nats.connect(names.urls, max_reconnect_attempts=-1), NATS_CONNECT_S)
    printed = 0
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(names.stream)
        except NotFoundError:
            raise LookupError(
                f"NATS at {names.url} has no stream {names.stream} (it is created when a relay starts)"
            ) from None
        if start.since is not None:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start.since)
        else:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL if start.from_start else DeliverPolicy.NEW
            )
        subscription = await js.subscribe(
            filter_subject(names, tenant, task_id), stream=names.stream, ordered_consumer=True, config=config
        )
        while not stop.is_set():
            try:
                message = await subscription.next_msg(timeout=IDLE_S)
            except NatsTimeoutError:
                if _reader_left(out):
                    raise BrokenPipeError("stdout's reader went away") from None
                continue
            text = message.data.decode()
            out.write((text if as_json else line(json.loads(text))) + "\n")
            out.flush()
            printed += 1
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    return printed


async def run(names: NatsNames, **options: Any) -> int:
    """``tail`` until Ctrl-C or SIGTERM, which end it quietly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await tail(names, stop, **options)
    return 0
