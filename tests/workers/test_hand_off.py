"""The hand-off (ADR 0032): a task a gateway of the worker's process submits is leased in its own commit.

On PostgreSQL and in memory: the lease is granted in the submission's commit and the reserved
slot's runner runs the task with no claim; a resend grants nothing; reserved slots count as
taken for claims; a worker that does not run, drains or lacks the skill version reserves nothing;
a blocking SendMessage hands over, starts the runner even when its caller is gone, and answers
with what the runner committed (no wait on the log) unless the runner lost its lease; a
returnImmediately send is queued. With every slot taken a submission waits for the next freed
one, unless a queued task waits (ADR 0054). A stream's send hands over to an idle worker only
(ADR 0055).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from api.service import A2AService
from api.waiting import PollingWaiter, TaskWaiter
from api.wire import SendMessageRequest
from domain.skill import Complete, Skill, SkillRegistry, StepContext, StepOutcome
from domain.states import TaskState
from domain.task import Task
from store.log.application import TaskApplication
from store.public_form.task_wire import task_to_wire
from tests.support.tasks import new_task
from workers.metrics import WorkerMetrics
from workers.task_runner import RunPolicy
from workers.worker import Reservation, Worker, WorkerConfig

LEASE_S = 30.0
"""Far longer than any test here: a task that ends did so under its handed-over lease, not after it."""


def _clock() -> datetime:
    return datetime.now(UTC)


def _message(text: str = "go") -> dict[str, object]:
    return {"messageId": uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


def _service(
    store: TaskApplication, registry: SkillRegistry, process: Worker, default_skill: str, waiter: TaskWaiter
) -> A2AService:
    """The gateway's service over ``store``, handing tasks to ``process``."""
    return A2AService(
        store=store,
        registry=registry,
        clock=_clock,
        default_skill=default_skill,
        waiter=waiter,
        hand_off=process,
    )


async def _wait_for(check: Callable[[], bool], seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.02)):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def _reserve(process: Worker) -> Reservation:
    """A slot of ``process``, once it runs (every reservation is settled: started or released)."""
    found: list[Reservation] = []

    def reserved() -> bool:
        slot = process.reserve("done", 1)
        if slot is not None:
            found.append(slot)
        return slot is not None

    await _wait_for(reserved)
    return found[0]


@pytest.fixture
def store(any_store: TaskApplication) -> TaskApplication:
    return any_store


@pytest.fixture
def release() -> asyncio.Event:
    """Set to let the ``held`` skill's step return."""
    return asyncio.Event()


@pytest.fixture
def registry(release: asyncio.Event) -> SkillRegistry:
    async def done(_: StepContext) -> StepOutcome:
        return Complete(message="done")

    async def held(_: StepContext) -> StepOutcome:
        await release.wait()
        return Complete(message="released")

    return SkillRegistry([Skill("done", 1, [done]), Skill("held", 1, [held])])


def _worker(
    store: TaskApplication, registry: SkillRegistry, *, concurrency: int = 2, watch_seconds: float = 0.25
) -> Worker:
    return Worker(
        store=store,
        registry=registry,
        clock=_clock,
        # Polling all but off: a task whose lease nobody runs stays as it is for the whole test.
        config=WorkerConfig(
            worker_id="w1",
            lease_seconds=LEASE_S,
            concurrency=concurrency,
            grace_seconds=1,
            poll_seconds=60,
            watch_seconds=watch_seconds,
        ),
        policy=RunPolicy(max_pause=timedelta(days=1)),
        metrics=WorkerMetrics(),
    )


@contextlib.asynccontextmanager
async def _running(process: Worker) -> AsyncIterator[Worker]:
    """``process`` running until the block ends, then stopped."""
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    try:
        yield process
    finally:
        stop.set()
        await running


@pytest.fixture
async def worker(
    store: TaskApplication, registry: SkillRegistry, release: asyncio.Event
) -> AsyncIterator[Worker]:
    async with _running(_worker(store, registry)) as process:
        (await _reserve(process)).release()  # running
        yield process
        release.set()


def _submit_leased(
    store: TaskApplication, registry: SkillRegistry, message: dict[str, object], skill: str = "done"
) -> tuple[Task, Task | None]:
    return store.submit_leased(
        tenant="acme",
        message=message,
        skill=registry.newest(skill),
        clock=_clock,
        worker="w1",
        lease_seconds=LEASE_S,
    )


async def test_the_lease_is_granted_in_the_submission_commit_and_the_slot_runs_the_task(
    store: TaskApplication, registry: SkillRegistry, worker: Worker
) -> None:
    slot = worker.reserve("done", 1)
    assert slot is not None
    task, copy = await asyncio.to_thread(_submit_leased, store, registry, _message())

    assert copy is not None
    assert copy is not task  # the runner's commits never touch the answer's task
    assert (task.version, task.state, task.lease_owner, task.lease_epoch) == (
        2,
        "TASK_STATE_WORKING",
        "w1",
        1,
    )
    stored = store.get(task.id)
    assert (stored.version, stored.lease_owner, stored.lease_epoch) == (2, "w1", 1)  # one commit, both events
    slot.start(copy)
    await _wait_for(lambda: store.get(task.id).is_terminal)

    history = list(store.history(task.id))
    assert [type(e).__name__ for e in history[:2]] == ["Submitted", "LeaseGranted"]
    assert [e.epoch for e in history if isinstance(e, Task.LeaseGranted)] == [1]  # no claim came after
    assert store.get(task.id).state == "TASK_STATE_COMPLETED"
    assert worker.metrics is not None
    assert worker.metrics.registry.get_sample_value("longhaul_worker_claims_total", {"skill": "done"}) == 1


async def test_a_resend_grants_no_lease(
    store: TaskApplication, registry: SkillRegistry, worker: Worker
) -> None:
    message = _message()
    first = store.submit(tenant="acme", message=message, skill=registry.newest("held"), clock=_clock)
    await _wait_for(lambda: store.get(first.id).lease_owner == "w1")  # claimed from the queue

    again, copy = await asyncio.to_thread(_submit_leased, store, registry, message, "held")

    assert copy is None
    assert again.id == first.id
    assert [e.epoch for e in store.history(first.id) if isinstance(e, Task.LeaseGranted)] == [1]


async def test_reserved_slots_are_taken_for_claims_until_released(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    async with _running(_worker(store, registry, concurrency=1)) as process:
        slot = await _reserve(process)
        assert process.reserve("done", 1) is None  # the one slot is reserved
        queued = new_task(_clock(), skill="done")
        store.save_tasks(queued)
        await asyncio.sleep(0.5)  # the append woke the worker: it has no slot to claim into
        assert store.get(queued.id).state == "TASK_STATE_SUBMITTED"

        slot.release()
        await _wait_for(lambda: store.get(queued.id).is_terminal)


async def test_the_watch_never_takes_a_runners_own_last_commit_for_a_lost_lease(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    # The watch reads the owners of the running tasks every millisecond: it sees each task as
    # its runner's own commit left it (completed) while the runner is still among the running.
    answers = []
    async with _running(_worker(store, registry, watch_seconds=0.001)) as process:
        for _ in range(30):
            slot = await _reserve(process)
            _, copy = await asyncio.to_thread(_submit_leased, store, registry, _message())
            assert copy is not None
            slot.start(copy)
            answers.append(await slot.ran(10))

    assert [None if a is None else a.state for a in answers] == ["TASK_STATE_COMPLETED"] * 30


async def test_nothing_is_reserved_by_a_worker_that_does_not_run_or_lacks_the_skill(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    process = _worker(store, registry)
    assert process.reserve("done", 1) is None  # not started
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    slot = await _reserve(process)
    assert process.reserve("done", 2) is None  # a version this release does not run
    assert process.reserve("unknown", 1) is None
    slot.release()
    stop.set()
    await running
    assert process.reserve("done", 1) is None  # stopped


async def test_return_immediately_is_queued_and_a_gone_blocking_caller_still_gets_it_run(
    store: TaskApplication, registry: SkillRegistry, worker: Worker, release: asyncio.Event
) -> None:
    service = _service(store, registry, worker, "held", PollingWaiter(store))
    request = SendMessageRequest.model_validate(
        {"message": _message(), "configuration": {"returnImmediately": True}}
    )
    answer = await service.send_message(request)
    assert answer["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"  # queued: an answer that does not wait

    gone = asyncio.ensure_future(
        service.send_message(SendMessageRequest.model_validate({"message": _message()}))
    )
    await asyncio.sleep(0)  # the submission's thread is on its way
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    await _wait_for(lambda: len(worker.runners) == 2)  # the queued one claimed, the gone one started
    handed = [t for t in worker.runners if t != UUID(answer["task"]["id"])]
    history: list[Any] = list(store.history(handed[0]))
    assert [type(e).__name__ for e in history[:2]] == ["Submitted", "LeaseGranted"]
    assert history[1].timestamp == history[0].timestamp  # granted in the submission's commit, not claimed
    queued: list[Any] = list(store.history(UUID(answer["task"]["id"])))
    assert queued[1].timestamp > queued[0].timestamp  # claimed from the queue afterwards

    release.set()
    await _wait_for(lambda: not worker.runners)


class _NoWake:
    """A waiter that fails the test if the service ever waits on the log."""

    async def wait_for_change(self, task: Task, timeout: float) -> None:  # noqa: ASYNC109 - the port's
        raise AssertionError(f"waited on the log for {task.id}")


async def test_a_blocking_send_answers_with_what_the_runner_committed(
    store: TaskApplication, registry: SkillRegistry, worker: Worker
) -> None:
    service = _service(store, registry, worker, "done", _NoWake())
    answer = await service.send_message(SendMessageRequest.model_validate({"message": _message()}))

    wire = answer["task"]
    assert wire["status"]["state"] == "TASK_STATE_COMPLETED"
    stored = store.get(UUID(wire["id"]))
    assert wire == task_to_wire(stored)  # the runner's copy is the log's task, version for version


async def test_a_runner_that_loses_its_lease_leaves_the_answer_to_the_log(
    store: TaskApplication, registry: SkillRegistry, worker: Worker
) -> None:
    service = _service(store, registry, worker, "held", PollingWaiter(store))
    sending = asyncio.ensure_future(
        service.send_message(SendMessageRequest.model_validate({"message": _message()}))
    )
    await _wait_for(lambda: len(worker.runners) == 1)
    (task_id,) = worker.runners
    await asyncio.to_thread(store.cancel, task_id, tenant="default", clock=_clock)  # the runner is fenced out

    answer = await asyncio.wait_for(sending, 10)
    assert answer["task"]["status"]["state"] == "TASK_STATE_CANCELED"


# ---------------------------------------------------------------------- waiting for a slot


async def test_a_submission_waits_for_the_next_freed_slot(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    async with _running(_worker(store, registry, concurrency=1)) as process:
        held = await _reserve(process)
        waiting = asyncio.ensure_future(process.reserve_within("done", 1, 10))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # the one slot is held

        held.release()
        given = await asyncio.wait_for(waiting, 1)
        assert given is not None
        assert process.reserve("done", 1) is None  # the freed slot went to the waiting submission
        given.release()


async def test_a_freed_slot_goes_to_the_queue_when_another_append_waits_there(
    store: TaskApplication, registry: SkillRegistry, release: asyncio.Event
) -> None:
    async with _running(_worker(store, registry, concurrency=1)) as process:
        slot = await _reserve(process)
        _, copy = await asyncio.to_thread(_submit_leased, store, registry, _message(), "held")
        assert copy is not None
        slot.start(copy)  # the one slot runs a task that waits for ``release``
        waiting = asyncio.ensure_future(process.reserve_within("done", 1, 10))
        queued = new_task(_clock(), skill="done")
        store.save_tasks(queued)  # another's append: the queue may hold a task to claim
        await asyncio.sleep(0.3)
        assert not waiting.done()

        release.set()
        given = await asyncio.wait_for(waiting, 5)
        assert given is not None
        # The freed slot went to the claim loop first: the queued task was not passed over.
        assert store.get(queued.id).lease_epoch == 1
        given.release()


async def test_a_wait_in_vain_and_a_gone_caller_leave_no_slot_taken(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    async with _running(_worker(store, registry, concurrency=1)) as process:
        held = await _reserve(process)
        assert await process.reserve_within("done", 1, 0.05) is None  # its task would be queued

        gone = asyncio.ensure_future(process.reserve_within("done", 1, 10))
        await asyncio.sleep(0.05)
        held.release()  # given to the waiting submission at once ...
        gone.cancel()  # ... whose caller goes away before it resumes
        with pytest.raises(asyncio.CancelledError):
            await gone
        slot = process.reserve("done", 1)
        assert slot is not None  # the slot came back
        slot.release()


async def test_a_stopping_worker_answers_every_waiting_submission(
    store: TaskApplication, registry: SkillRegistry
) -> None:
    process = _worker(store, registry, concurrency=1)
    stop = asyncio.Event()
    running = asyncio.ensure_future(process.run(stop))
    held = await _reserve(process)
    waiting = asyncio.ensure_future(process.reserve_within("done", 1, 30))
    await asyncio.sleep(0.05)
    stop.set()
    assert await asyncio.wait_for(waiting, 2) is None  # queued instead: no wait for the drain
    held.release()
    await running


async def test_a_blocking_send_past_the_free_slots_is_still_handed_over(
    store: TaskApplication, registry: SkillRegistry, release: asyncio.Event
) -> None:
    async with _running(_worker(store, registry, concurrency=1)) as process:
        service = _service(store, registry, process, "done", _NoWake())
        held = await _reserve(process)
        sending = asyncio.ensure_future(
            service.send_message(SendMessageRequest.model_validate({"message": _message()}))
        )
        await asyncio.sleep(0.1)
        held.release()

        answer = await asyncio.wait_for(sending, 5)  # _NoWake: never waited on the log
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        history: list[Any] = list(store.history(UUID(answer["task"]["id"])))
        assert [type(e).__name__ for e in history[:2]] == ["Submitted", "LeaseGranted"]
        assert history[1].timestamp == history[0].timestamp  # granted in the submission's commit


async def _reserve_idle(process: Worker) -> Reservation:
    """A slot of ``process`` once it runs and is idle (its first claim round read the queue)."""
    for _ in range(500):
        slot = process.reserve_idle("done", 1)
        if slot is not None:
            return slot
        await asyncio.sleep(0.02)
    raise AssertionError("the worker never became idle")


async def test_only_an_idle_worker_gives_a_slot_to_a_stream(
    store: TaskApplication, registry: SkillRegistry, release: asyncio.Event
) -> None:
    async with _running(_worker(store, registry, concurrency=2)) as process:
        (await _reserve_idle(process)).release()
        held = await _reserve(process)
        assert process.reserve_idle("done", 1) is None  # a slot reserved: not idle
        held.release()
        waiting = asyncio.ensure_future(process.reserve_within("done", 1, 10))
        given = await asyncio.wait_for(waiting, 1)
        assert given is not None
        given.release()
        store.save_tasks(new_task(_clock(), skill="held"))  # another's append: the queue may hold it
        await _wait_for(lambda: len(process.runners) == 1)  # claimed, and held by ``release``
        assert process.reserve_idle("done", 1) is None  # a runner runs: not idle
        free = process.reserve("done", 1)
        assert free is not None  # though a slot is free
        free.release()  # settled: the stop need not wait out its grace for it
        release.set()


async def test_a_streams_task_goes_to_an_idle_worker_and_to_the_queue_of_a_busy_one(
    store: TaskApplication, registry: SkillRegistry, release: asyncio.Event
) -> None:
    async with _running(_worker(store, registry, concurrency=2)) as process:
        service = _service(store, registry, process, "held", PollingWaiter(store))
        (await _reserve_idle(process)).release()
        request = SendMessageRequest.model_validate({"message": _message()})
        first = await service.accept_message(request, hand_off=True)  # as the only stream's
        assert first.state == TaskState.WORKING  # its lease is in the answer's commit
        assert first.id in process.runners
        history: list[Any] = list(store.history(first.id))
        assert [type(e).__name__ for e in history[:2]] == ["Submitted", "LeaseGranted"]
        assert history[1].timestamp == history[0].timestamp  # granted in the submission's commit

        second = await service.accept_message(
            SendMessageRequest.model_validate({"message": _message()}), hand_off=True
        )
        assert second.state == TaskState.SUBMITTED  # the worker runs ``first``: queued
        await _wait_for(lambda: len(process.runners) == 2)  # claimed from the queue afterwards
        queued: list[Any] = list(store.history(second.id))
        assert [type(e).__name__ for e in queued[:2]] == ["Submitted", "LeaseGranted"]
        assert queued[1].timestamp > queued[0].timestamp
        release.set()
        await _wait_for(lambda: not process.runners)
