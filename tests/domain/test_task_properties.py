"""A Hypothesis state machine over random Task command sequences.

Times move forward by seconds, hours or days; epochs are sometimes stale or from the future;
step indexes are sometimes repeated or skipped. After every rule the invariants below hold.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

from hypothesis import HealthCheck, settings
from hypothesis import event as record_statistic  # shown by ``pytest --hypothesis-show-statistics``
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from domain.errors import DomainError
from domain.states import INTERRUPTED, TERMINAL, TaskState, can_transition
from domain.task import ATTEMPT_CAUSES, AttemptCause, Task
from tests.domain.support import FIRST_MESSAGE, T0, MemoryStore, state_of, text_message

# Text without lone surrogates (not encodable as UTF-8) and too short to collide with the
# eventsourcing JSON transcoder's "_type_"/"_data_" markers.
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=5)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_seconds = st.integers(0, 90).map(lambda s: timedelta(seconds=s))
deltas = st.one_of(  # one_of picks a branch uniformly: mostly seconds, sometimes hours or days
    _seconds,
    _seconds,
    _seconds,
    st.integers(1, 48).map(lambda h: timedelta(hours=h)),
    st.integers(1, 10).map(lambda d: timedelta(days=d)),
)
durations = st.sampled_from(
    [timedelta(minutes=5)] * 4
    + [timedelta(days=2)] * 2
    + [timedelta(seconds=-5), timedelta(0), timedelta(seconds=1)]
)
epoch_picks = st.sampled_from(["current"] * 6 + ["stale", "future", "zero"])
step_picks = st.one_of(st.sampled_from(["next"] * 6 + ["previous", "skip"]), st.integers(-2, 12))

_STATES_ENTERED = Task.states_entered()
_FENCED_EVENTS = (
    Task.LeaseExtended,
    Task.LeaseReleased,
    Task.StepCompleted,
    Task.CheckpointSaved,
    Task.ProgressReported,
    Task.InputRequested,
    Task.AuthRequested,
    Task.ArtifactChunkAppended,
    Task.EffectStarted,
    Task.EffectRecorded,
    Task.Completed,
    Task.Rejected,
)
_CONCRETE_BASED = (
    Task.InputRequested,
    Task.AuthRequested,
    Task.Completed,
    Task.Failed,
    Task.Canceled,
    Task.Rejected,
)
"""The events recorded under the two shared bases; the bases themselves never are."""
_STEP_EVENTS = (Task.StepCompleted, Task.InputRequested, Task.AuthRequested)
_AFTER_THE_END = (Task.PushConfigSet, Task.PushConfigRemoved, Task.Expired)
"""The only events a terminal task records (ADR 0025): none changes what a client sees."""


def visible(task: Task) -> tuple[Any, ...]:
    """What an A2A client sees of a task (the wire Task is built from these), and its end time."""
    return (
        task.state,
        task.status_message,
        task.status_timestamp,
        task.artifacts,
        task.history,
        task.context_id,
        task.ended_at,
    )


def comparable(task: Task) -> dict[str, Any]:
    return {k: v for k, v in vars(task).items() if k != "_pending_events"}


class TaskLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.app = MemoryStore()
        self.now = T0
        self.task = Task.submit(
            task_id=uuid4(),
            now=self.now,
            tenant="acme",
            context_id="ctx",
            skill="access-review",
            skill_version=1,
            message=FIRST_MESSAGE,
            params={},
        )
        self.events: list[Any] = list(self.task.collect_events())
        self.app.save(*self.events)
        self.terminal_state: TaskState | None = None
        self.terminal_view: tuple[Any, ...] = ()
        self.committed_steps: list[int] = []
        self.effect_keys: list[str] = []
        self.refusals = 0
        self.snapshot_version = 0

    # ------------------------------------------------------------------ helpers

    def epoch(self, pick: str) -> int:
        current = self.task.lease_epoch
        return {"current": current, "stale": current - 1, "future": current + 1, "zero": 0}[pick]

    def step(self, pick: str | int) -> int:
        if isinstance(pick, int):
            return pick
        nxt = self.task.next_step
        return {"next": nxt, "previous": nxt - 1, "skip": nxt + 1}[pick]

    def attempt(self, command: Callable[[], object], *, epoch: int | None = None) -> None:
        """Run a command; check that a refusal records nothing and a success is legal."""
        task = self.task
        before, version, source = state_of(task), task.version, task.state
        visible_before = copy.deepcopy(visible(task))
        try:
            command()
        except DomainError as error:
            record_statistic(f"refused: {type(error).__name__}")
            self.refusals += 1
            assert list(task.collect_events()) == [], "a refused command recorded an event"
            assert task.version == version
            assert state_of(task) == before, "a refused command changed the aggregate"
            return
        new = list(task.collect_events())
        self.check_attempts(new, before, epoch)
        assert task.version == version + len(new)
        if task.state != source:
            assert can_transition(source, task.state), f"illegal transition {source} -> {task.state}"
        for event in new:
            record_statistic(type(event).__name__)
            entered = _STATES_ENTERED.get(type(event).__name__)
            if entered is None:
                assert task.state == source, f"{type(event).__name__} changed the state yet names none"
            else:
                assert task.state == entered, f"{type(event).__name__} left the task {task.state}"
            if source in TERMINAL:
                record_statistic(f"after the end: {type(event).__name__}")
                assert not before["expired"], f"{type(event).__name__} recorded on an expired task"
                assert isinstance(event, _AFTER_THE_END), (
                    f"{type(event).__name__} recorded on a {source} task"
                )
                assert visible(task) == visible_before, f"{type(event).__name__} changed a {source} task"
            assert not isinstance(event, Task._PauseRequested | Task._Ended) or type(event) in _CONCRETE_BASED
            if isinstance(event, Task.Failed) and event.epoch is None:
                assert source in INTERRUPTED, "only the sweeper fails without a lease, and only a pause"
            if isinstance(event, _FENCED_EVENTS) or (
                isinstance(event, Task.Failed) and event.epoch is not None
            ):
                assert epoch is not None
                assert event.epoch == epoch, "the event records another epoch than its holder's"
                assert before["state"] == TaskState.WORKING
                assert before["lease_owner"] is not None, "committed without a lease"
                assert epoch == before["lease_epoch"], "committed with a stale epoch"
                assert self.now < before["lease_until"], "committed after the lease expired"
            if isinstance(event, _STEP_EVENTS):
                assert event.step not in self.committed_steps, f"step {event.step} committed twice"
                self.committed_steps.append(event.step)
            if isinstance(event, Task.EffectRecorded):
                assert event.key not in self.effect_keys, f"effect {event.key} recorded twice"
                self.effect_keys.append(event.key)
            if isinstance(event, Task.LeaseGranted):
                assert event.epoch == before["lease_epoch"] + 1
                lease_until = before["lease_until"]
                assert before["lease_owner"] is None or lease_until is None or self.now >= lease_until, (
                    "granted while another lease was valid"
                )
        self.events.extend(new)
        self.app.save(*new)

    def check_attempts(self, new: list[Any], before: dict[str, Any], epoch: int | None) -> None:
        """Failed attempts: counted one by one, by the holder or by a claim, reset by an outcome."""
        if len(new) == 2:  # a claim that found a lost worker's lease: its attempt, then the grant
            lost, granted = new
            assert isinstance(lost, Task.StepAttemptFailed)
            assert isinstance(granted, Task.LeaseGranted)
            assert lost.cause == "lease_lost"
            assert (lost.worker, lost.epoch) == (before["lease_owner"], before["lease_epoch"])
            assert before["state"] == TaskState.WORKING
            assert self.now >= before["lease_until"]
        else:
            assert len(new) <= 1, "every command records at most one event (a claim: two)"
        attempts = [e for e in new if isinstance(e, Task.StepAttemptFailed)]
        for event in attempts:
            assert event.step == before["next_step"], "an attempt at another step than the next"
            assert event.attempt == len(before["failed_attempts"]) + 1, "attempts are counted one by one"
            if event.cause != "lease_lost":
                assert event.epoch == epoch == before["lease_epoch"], "a holder's attempt, fenced"
                assert before["lease_owner"] is not None
                assert self.now < before["lease_until"]
        if new and not attempts:
            if any(isinstance(e, _STEP_EVENTS) for e in new):
                assert self.task.failed_attempts == [], "a step outcome starts the count again"
            else:
                assert self.task.failed_attempts == before["failed_attempts"], "only attempts count"

    # ------------------------------------------------------------------ rules: time

    @rule(delta=deltas)
    def time_passes(self, delta: timedelta) -> None:
        self.now += delta

    # ------------------------------------------------------------------ rules: worker
    # ``claim`` and ``run_next_step`` are the happy path, so that random runs get far enough to
    # pause, resume and finish; the rules after them draw stale epochs and wrong steps too.

    @rule()
    def claim(self) -> None:
        self.attempt(
            lambda: self.task.grant_lease(worker="w0", now=self.now, until=self.now + timedelta(minutes=5))
        )

    @rule(checkpoint=json_values)
    def run_next_step(self, checkpoint: Any) -> None:
        epoch, index = self.task.lease_epoch, self.task.next_step
        self.attempt(
            lambda: self.task.complete_step(
                epoch=epoch,
                now=self.now,
                step=index,
                checkpoint={"value": checkpoint},
                lease_until=self.now + timedelta(minutes=5),
            ),
            epoch=epoch,
        )

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]), lease=durations)
    def grant_lease(self, worker: str, lease: timedelta) -> None:
        self.attempt(lambda: self.task.grant_lease(worker=worker, now=self.now, until=self.now + lease))

    @rule(pick=epoch_picks, lease=durations)
    def extend_lease(self, pick: str, lease: timedelta) -> None:
        epoch = self.epoch(pick)
        self.attempt(
            lambda: self.task.extend_lease(epoch=epoch, now=self.now, until=self.now + lease), epoch=epoch
        )

    @rule(pick=epoch_picks)
    def release_lease(self, pick: str) -> None:
        epoch = self.epoch(pick)
        self.attempt(lambda: self.task.release_lease(epoch=epoch, now=self.now, reason="r"), epoch=epoch)

    @rule(pick=epoch_picks, step=step_picks, checkpoint=json_values, sub_step=st.booleans())
    def commit_step(self, pick: str, step: str | int, checkpoint: Any, sub_step: bool) -> None:
        epoch, index = self.epoch(pick), self.step(step)
        commit = self.task.save_checkpoint if sub_step else self.task.complete_step
        self.attempt(
            lambda: commit(
                epoch=epoch,
                now=self.now,
                step=index,
                checkpoint={"value": checkpoint},
                lease_until=self.now + timedelta(minutes=5),
            ),
            epoch=epoch,
        )

    @rule(pick=epoch_picks, text=_text)
    def report_progress(self, pick: str, text: str) -> None:
        epoch = self.epoch(pick)
        message = text_message(text)
        self.attempt(
            lambda: self.task.report_progress(epoch=epoch, now=self.now, message=message), epoch=epoch
        )

    @rule(
        pick=epoch_picks,
        step=step_picks,
        wait=durations,
        on_deadline=st.sampled_from(["fail", "cancel", "ignore"]),
        auth=st.booleans(),
    )
    def request_input(
        self, pick: str, step: str | int, wait: timedelta, on_deadline: str, auth: bool
    ) -> None:
        epoch, index = self.epoch(pick), self.step(step)
        self.attempt(
            lambda: self.task.request_input(
                epoch=epoch,
                now=self.now,
                step=index,
                checkpoint={"asked": index},
                question=text_message("ok?"),
                deadline=self.now + wait,
                on_deadline=on_deadline,
                auth=auth,
            ),
            epoch=epoch,
        )

    @rule(
        pick=epoch_picks,
        artifact_id=st.sampled_from(["a", "b"]),
        parts=st.lists(_text, max_size=2),
        append=st.booleans(),
        last_chunk=st.booleans(),
    )
    def append_artifact(
        self, pick: str, artifact_id: str, parts: list[str], append: bool, last_chunk: bool
    ) -> None:
        epoch = self.epoch(pick)
        artifact = {"artifactId": artifact_id, "parts": [{"text": p} for p in parts]}
        self.attempt(
            lambda: self.task.append_artifact(
                epoch=epoch, now=self.now, artifact=artifact, append=append, last_chunk=last_chunk
            ),
            epoch=epoch,
        )

    @rule(pick=epoch_picks, key=st.sampled_from(["k1", "k2", "k3"]), result=json_values)
    def record_effect(self, pick: str, key: str, result: Any) -> None:
        epoch = self.epoch(pick)
        self.attempt(
            lambda: self.task.record_effect(epoch=epoch, now=self.now, key=key, result=result), epoch=epoch
        )

    @rule(pick=epoch_picks, step=step_picks, cause=st.sampled_from(ATTEMPT_CAUSES))
    def fail_attempt(self, pick: str, step: str | int, cause: AttemptCause) -> None:
        epoch, index = self.epoch(pick), self.step(step)
        self.attempt(
            lambda: self.task.fail_attempt(
                epoch=epoch,
                now=self.now,
                step=index,
                cause=cause,
                detail="d",
            ),
            epoch=epoch,
        )

    @rule(pick=epoch_picks, key=st.sampled_from(["k1", "k2", "k3"]))
    def start_effect(self, pick: str, key: str) -> None:
        epoch = self.epoch(pick)
        self.attempt(lambda: self.task.start_effect(epoch=epoch, now=self.now, key=key), epoch=epoch)

    @rule(pick=epoch_picks, how=st.sampled_from(["complete", "fail", "reject"]))
    def finish(self, pick: str, how: str) -> None:
        epoch, task, now = self.epoch(pick), self.task, self.now
        commands: dict[str, Callable[[], None]] = {
            "complete": lambda: task.complete(epoch=epoch, now=now, message=None),
            "fail": lambda: task.fail(epoch=epoch, now=now, reason="x", message=None),
            "reject": lambda: task.reject(epoch=epoch, now=now, reason="x", message=None),
        }
        self.attempt(commands[how], epoch=epoch)

    # ------------------------------------------------------------------ rules: client and sweeper

    @rule(action=st.sampled_from(["answer"] * 3 + ["expire_pause", "cancel"]))
    def client_or_sweeper(self, action: str) -> None:
        task, now = self.task, self.now
        commands: dict[str, Callable[[], None]] = {
            "answer": lambda: task.receive_input(now=now, message=text_message("yes", role="ROLE_USER")),
            "expire_pause": lambda: task.expire_pause(now=now, message=text_message("late")),
            "cancel": lambda: task.cancel(now=now, reason="client"),
        }
        self.attempt(commands[action])

    @rule(config_id=st.sampled_from(["p1", "p2"]), remove=st.booleans(), secret=st.booleans())
    def push_config(self, config_id: str, remove: bool, secret: bool) -> None:
        """A client sets or deletes a push config, at any moment: before the end and after it."""
        task, now = self.task, self.now
        if remove:
            self.attempt(lambda: task.remove_push_config(now=now, config_id=config_id))
            return
        config: dict[str, Any] = {"id": config_id, "url": "https://h"}
        if secret:
            config |= {"token": "t", "authentication": {"scheme": "Bearer", "credentials": "c"}}
        self.attempt(lambda: task.set_push_config(now=now, config=config))

    @invariant()
    def configs_set_after_the_end_keep_no_secrets(self) -> None:
        """Nothing is delivered after the end, so nothing needs a config's secrets then."""
        ended = False
        for event in self.events:
            ended = ended or isinstance(event, Task._Ended)
            if ended and isinstance(event, Task.PushConfigSet):
                assert "token" not in event.config
                assert "credentials" not in event.config.get("authentication", {})

    @rule()
    def expire(self) -> None:
        self.attempt(lambda: self.task.expire(now=self.now, reason="retention"))

    @rule()
    def take_snapshot(self) -> None:
        """The store loads from snapshots too (every 100 events in production)."""
        if self.task.version > self.snapshot_version:
            self.app.take_snapshot(self.task.id)
            self.snapshot_version = self.task.version

    # ------------------------------------------------------------------ invariants

    @invariant()
    def replaying_the_events_rebuilds_the_same_task(self) -> None:
        rebuilt: Any = None
        for event in self.events:
            rebuilt = event.mutate(rebuilt)
        assert comparable(rebuilt) == comparable(self.task)
        assert self.task.version == len(self.events)

    @invariant()
    def the_stored_log_rebuilds_the_same_task(self) -> None:
        """Through the JSON transcoder of an in-memory (POPO) store, from the latest snapshot."""
        stored: Task = self.app.repository.get(self.task.id)
        assert comparable(stored) == comparable(self.task)
        from_events_only: Task = self.app.repository.get(self.task.id, version=self.task.version)
        assert comparable(from_events_only) == comparable(self.task)

    @invariant()
    def terminal_states_absorb(self) -> None:
        """A terminal task stays as it ended; its end time is that of its terminal event."""
        if self.terminal_state is not None:
            assert self.task.state == self.terminal_state
            assert visible(self.task) == self.terminal_view
        elif self.task.state in TERMINAL:
            self.terminal_state = self.task.state
            self.terminal_view = copy.deepcopy(visible(self.task))
            ended = next(e for e in reversed(self.events) if isinstance(e, Task._Ended))
            assert self.task.ended_at == ended.timestamp
        assert (self.task.ended_at is None) == (self.task.state not in TERMINAL)
        assert not self.task.expired or self.task.state in TERMINAL

    @invariant()
    def at_most_one_holder_and_only_while_working(self) -> None:
        task = self.task
        assert (task.lease_owner is None) == (task.lease_until is None)
        if task.lease_owner is not None:
            assert task.state == TaskState.WORKING
        if task.state not in {TaskState.SUBMITTED, TaskState.WORKING}:
            assert task.lease_owner is None

    @invariant()
    def the_state_is_an_a2a_state_and_pauses_match_it(self) -> None:
        task = self.task
        assert task.state in TaskState.__members__.values()
        assert (task.pause is not None) == (task.state in INTERRUPTED)
        if task.pause is not None:
            assert task.pause.on_deadline in {"fail", "cancel"}


TaskLifecycle.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_task_lifecycle = TaskLifecycle.TestCase
