"""``longhaul up`` with a mark at each hop of a request's way (profiling aid, bench only).

Runs exactly the CLI's ``up``, after wrapping the methods a ``SendMessage`` passes through with a
timestamp at their entry (``name+``) and their return (``name-``), and the thread that ran them
(no behaviour change). At exit it writes the marks to ``$BENCH_HOPS_FILE``, one per line:
``<perf_counter> <name> <thread>``. ``bench.request_hops`` starts it and reads them.

The marks, in the order a blocking send on a free worker slot makes them:

- ``send``: ``A2AService.send_message``, the service call behind both bindings;
- ``submit``: ``TaskApplication._submit`` in its thread (the new task's events, the commit);
- ``commit``: the recorder's ``insert_events`` (the submission) or ``insert_events_each`` (the
  runner's group commit), and ``statement`` inside it: the append's ``execute`` alone (its round
  trip, the server's work and the commit);
- ``settle``: the submission's done callback, back on the event loop (``api.service._settle``);
- ``wait``: ``A2AService._settled``, the blocking caller waiting for the runner;
- ``runner``, ``step``: ``TaskRunner.run`` and one step (``_run_one``);
- ``group``: ``Committer._save_group`` on the event loop, ``save_each`` in its thread.

A stream (``SendStreamingMessage``) makes ``stream+`` as ``TaskStreams.open`` starts (the request
parsed, before its submission) and ``stream-`` once its first frame was written (``api.sse``'s
body asked for the next chunk after the first): the way to its first event, with the marks
above in between (``bench.request_hops --mode stream``).

``$BENCH_WHATIF=no-followers`` runs ``up`` without the relay, the projector, the dispatcher and
the sequencer (nothing follows the log): what the request's hops cost with nobody else in the
process; ``no-relay``, ``no-projector``, ``no-dispatcher``, ``no-sequencer`` without that one
(without the relay the dispatcher has nothing to deliver). ``no-worker`` runs no worker: nothing
claims or runs the tasks, and the gateway finds no slot to hand a task to, so each new task stays
in the run queue (for returnImmediately only: a blocking or streaming caller would wait for a task
nobody runs). ``no-worker,no-followers`` leaves the request path and its durable commit alone in
the process: the ceiling of a durable answer at c=1 (``bench.a2a_compare --what-if``). Not a
product configuration: the tasks' events miss what was left out.

    BENCH_HOPS_FILE=/tmp/hops.txt LONGHAUL_...=... python -m bench.traced_up up
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import psycopg

from api import service, sse, streams
from longhaul import cli, supervisor
from store.log import PostgresRunQueueRecorder, TaskApplication
from workers.committer import Committer
from workers.task_runner import TaskRunner

MARKS: list[tuple[float, str, str]] = []
_IN_COMMIT = threading.local()


def mark(name: str) -> None:
    MARKS.append((time.perf_counter(), name, threading.current_thread().name))


def _traced(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            mark(f"{name}+")
            try:
                return await fn(*args, **kwargs)
            finally:
                mark(f"{name}-")

        return traced_async

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        mark(f"{name}+")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"{name}-")

    return traced


def _marked_at_entry(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def entered(*args: Any, **kwargs: Any) -> Any:
        mark(name)
        return await fn(*args, **kwargs)

    return entered


Chunks = AsyncGenerator[bytes, None]


def _first_written(body: Callable[..., Chunks]) -> Callable[..., Chunks]:
    """``sse_body`` with ``stream-`` once its first chunk was written.

    Marked when the body is asked for its next chunk: after the first chunk's ``send`` returned
    and Litestar started the task group that streams the rest (``api.sse.SseStream``).
    """

    @functools.wraps(body)
    async def marked(*args: Any, **kwargs: Any) -> Chunks:
        first = True
        async with contextlib.aclosing(body(*args, **kwargs)) as chunks:
            async for chunk in chunks:
                yield chunk
                if first:
                    mark("stream-")
                    first = False

    return marked


def _commit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``commit`` marks, and the flag that makes the append's ``execute`` leave ``statement`` marks."""
    traced = _traced("commit", fn)

    @functools.wraps(fn)
    def flagged(*args: Any, **kwargs: Any) -> Any:
        _IN_COMMIT.on = True
        try:
            return traced(*args, **kwargs)
        finally:
            _IN_COMMIT.on = False

    return flagged


def _statement(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_IN_COMMIT, "on", False):
            return fn(self, *args, **kwargs)
        mark("statement+")
        try:
            return fn(self, *args, **kwargs)
        finally:
            mark("statement-")

    return execute


def install() -> None:
    """Wrap the hops' methods (and apply ``$BENCH_WHATIF``)."""
    recorder = PostgresRunQueueRecorder
    wrapped: list[tuple[object, str, Callable[..., Any]]] = [
        (service.A2AService, "send_message", _traced("send", service.A2AService.send_message)),
        (service.A2AService, "_settled", _traced("wait", service.A2AService._settled)),
        (service, "_settle", _traced("settle", service._settle)),
        (TaskApplication, "_submit", _traced("submit", TaskApplication._submit)),
        (TaskApplication, "save_each", _traced("save_each", TaskApplication.save_each)),
        (recorder, "insert_events", _commit(recorder.insert_events)),
        (recorder, "insert_events_each", _commit(recorder.insert_events_each)),
        (psycopg.Cursor, "execute", _statement(psycopg.Cursor.execute)),
        (TaskRunner, "run", _traced("runner", TaskRunner.run)),
        (TaskRunner, "_run_one", _traced("step", TaskRunner._run_one)),
        (Committer, "_save_group", _traced("group", Committer._save_group)),
        (streams.TaskStreams, "open", _marked_at_entry("stream+", streams.TaskStreams.open)),
        (sse, "sse_body", _first_written(sse.sse_body)),
    ]
    for owner, name, wrapper in wrapped:
        setattr(owner, name, wrapper)
    try:
        whatif = what_ifs(os.environ.get("BENCH_WHATIF", ""))
    except ValueError as error:
        raise SystemExit(f"BENCH_WHATIF: {error}") from None
    left_out: list[tuple[object, str, Callable[..., Any]]] = []
    if whatif & {"no-followers", *(f"no-{part}" for part in FOLLOWERS)}:
        left_out.append((supervisor, "log_followers", _without(supervisor.log_followers, whatif)))
    if "no-worker" in whatif:
        left_out.append((supervisor, "run_worker", _idle_worker))
    for owner, name, wrapper in left_out:
        setattr(owner, name, wrapper)


FOLLOWERS = ("relay", "projector", "dispatcher", "sequencer")
"""``supervisor.log_followers``'s parts, in the order it returns them."""
WHAT_IFS = ("no-followers", *(f"no-{part}" for part in FOLLOWERS), "no-worker")
"""What ``$BENCH_WHATIF`` may name (comma-separated)."""


def what_ifs(text: str) -> set[str]:
    """The names of a comma-separated what-if list; ValueError for a name not in ``WHAT_IFS``."""
    names = {name for name in text.split(",") if name}
    unknown = names - set(WHAT_IFS)
    if unknown:
        raise ValueError(f"unknown {sorted(unknown)} (known: {', '.join(WHAT_IFS)})")
    return names


async def _idle_worker(settings: Any, store: Any, stop: asyncio.Event, *args: Any, **kwargs: Any) -> None:
    """``supervisor.run_worker`` for ``no-worker``: waits for the stop, never runs its worker."""
    await stop.wait()


def _without(log_followers: Callable[..., list[Any]], whatif: set[str]) -> Callable[..., list[Any]]:
    @functools.wraps(log_followers)
    def kept(*args: Any, **kwargs: Any) -> list[Any]:
        parts = log_followers(*args, **kwargs)
        assert len(parts) == len(FOLLOWERS), "supervisor.log_followers changed its parts"
        left = []
        for name, part in zip(FOLLOWERS, parts, strict=True):
            if "no-followers" in whatif or f"no-{name}" in whatif:
                part.close()  # a coroutine never started
            else:
                left.append(part)
        return left

    return kept


def _write() -> None:
    path = os.environ.get("BENCH_HOPS_FILE")
    if path:
        lines = (f"{t:.7f} {name} {thread}\n" for t, name, thread in MARKS)
        Path(path).write_text("".join(lines))


if __name__ == "__main__":
    install()
    atexit.register(_write)
    raise SystemExit(cli.main())
