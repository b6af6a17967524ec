"""The skill model agent authors write against.

A skill is a name, a version and an ordered list of async step functions. A step gets a
``StepContext`` and returns one ``StepOutcome``. The runtime (in ``workers``) makes each step
durable: it commits the outcome in one fenced append and resumes from the stored checkpoint
after any crash, so a step must be restartable from its checkpoint alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from domain.retry_policy import RetryPolicy

JSON = dict[str, Any]


class FilePath(Protocol):
    """A file on disk, as ``os.PathLike`` names one (a ``pathlib.Path``, say)."""

    def __fspath__(self) -> str: ...


FileContent = AsyncIterable[bytes] | FilePath | bytes
"""What a step may write as a file: chunks as they come, a file on disk, or bytes in hand."""

P = ParamSpec("P")
R = TypeVar("R")


class StepContext(Protocol):
    """What a running step may read and do. Implemented by the worker."""

    @property
    def task_id(self) -> str:
        """The task's id."""
        ...

    @property
    def checkpoint(self) -> JSON:
        """Everything earlier steps saved; a copy the step may change freely."""
        ...

    @property
    def params(self) -> JSON:
        """The skill parameters from the first message's data part."""
        ...

    @property
    def latest_input(self) -> JSON:
        """The latest message from the client (the first one, or the latest answer)."""
        ...

    async def once(
        self,
        key: str,
        fn: Callable[[str], Awaitable[Any]],
        *,
        check: Callable[[str], Awaitable[Any]] | None = None,
    ) -> Any:
        """Run a side effect at most once per task and ``key``.

        ``fn`` gets ``f"{task_id}:{key}"`` to pass downstream as an idempotency key. Its result
        (JSON) is recorded in the task's log before ``once`` returns; a resumed step gets the
        recorded result and ``fn`` is not called again.

        With ``check``, the start of the call is recorded first. A run that finds the effect
        started but not recorded (its worker died between the call and the record) calls
        ``check(idempotency_key)`` instead: a result other than ``None`` is what the downstream
        already did, and is recorded as the effect's result; ``None`` means it did nothing, and
        ``fn`` is called.
        """
        ...

    async def run_sync(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking code (sync I/O, a long computation) in a thread, off the event loop.

        A step that blocks the loop stops its worker's lease renewals and every other task of
        that worker. The thread cannot be stopped from outside: a step timeout stops waiting
        for it, and the thread runs on until its call returns.
        """
        ...

    async def commit(self, checkpoint: JSON, *, progress: str | None = None) -> None:
        """Save ``checkpoint`` mid-step (a sub-step commit); also renews the lease.

        With ``progress``, a progress message (as ``progress()`` commits it) is part of the same
        commit: a step that saves a checkpoint per item reports how far it got at no extra cost.
        """
        ...

    async def emit_artifact(
        self,
        artifact: JSON,
        *,
        append: bool = False,
        last_chunk: bool = True,
        checkpoint: JSON | None = None,
        progress: str | None = None,
    ) -> None:
        """Commit an artifact (A2A shape), or one chunk of it with ``append=True``.

        With ``checkpoint``, the chunk and the new checkpoint are one commit: a step that emits
        chunk by chunk resumes after the last chunk it committed and never sends one twice. With
        ``progress``, a progress message is part of that commit too.
        """
        ...

    async def emit_file(
        self,
        content: FileContent,
        *,
        filename: str,
        media_type: str = "application/octet-stream",
        artifact_id: str | None = None,
        append: bool = False,
        last_chunk: bool = True,
        checkpoint: JSON | None = None,
        progress: str | None = None,
    ) -> JSON:
        """Keep ``content`` in the file store, in constant memory, and commit it as an artifact.

        The artifact (``artifact_id``, by default ``filename``) gets one file part that names the
        bytes by their SHA-256 and size, with ``media_type`` and ``filename``; the hash is in the
        event, so the task's hash chain covers the bytes. Clients see the part with a URL to
        fetch them. A file of at most ``LONGHAUL_FILE_INLINE_MAX_BYTES`` stays inline (a ``raw``
        part). ``append``, ``last_chunk``, ``checkpoint`` and ``progress`` are those of
        ``emit_artifact``: a step that writes a large file chunk by chunk commits each chunk with
        its checkpoint and resumes after the last one. Returns the part as committed.

        A worker killed before the commit leaves no reference to the bytes; the re-run stores
        the same bytes at the same address, once.
        """
        ...

    def read_file(self, part: JSON) -> AsyncIterator[bytes]:
        """The bytes of a file part a client sent (a message's part), streamed in chunks.

        A file the client uploaded to longhaul is read from the file store, inline ``raw`` bytes
        are decoded, and any other ``http(s)`` URL is fetched, only from public addresses (the
        SSRF guard of webhooks).
        """
        ...

    async def progress(self, text: str) -> None:
        """Commit a progress message as the task's status message."""
        ...


@dataclass(frozen=True)
class Continue:
    """Go on with the next step; ``checkpoint`` replaces the stored one."""

    checkpoint: JSON


@dataclass(frozen=True)
class _Pause:
    question: str
    checkpoint: JSON
    deadline: timedelta | None = None
    on_deadline: str = "fail"
    data: JSON | None = None
    repeat: bool = False


@dataclass(frozen=True)
class AskInput(_Pause):
    """Pause for a person's answer.

    The step that returns this is finished: when the answer arrives, the *next* step runs with
    the answer as ``latest_input``. ``deadline`` is measured from the commit time; ``None``
    means the service's maximum pause (``LONGHAUL_MAX_PAUSE``). ``on_deadline`` is ``"fail"``
    or ``"cancel"``. ``data`` adds a data part to the question. With ``repeat=True`` the answer
    resumes the *same* step instead (for a step that asks again after an unusable answer).
    """


@dataclass(frozen=True)
class AskAuth(_Pause):
    """Pause for credentials, like ``AskInput`` but in TASK_STATE_AUTH_REQUIRED."""


@dataclass(frozen=True)
class Complete:
    """Finish the task with these artifacts and an optional final agent message."""

    artifacts: Sequence[JSON] = field(default_factory=tuple)
    message: str | None = None


@dataclass(frozen=True)
class Fail:
    """Fail the task with a reason the client sees as the status message."""

    reason: str


@dataclass(frozen=True)
class Reject:
    """Refuse the task (TASK_STATE_REJECTED) with a reason."""

    reason: str


StepOutcome = Continue | AskInput | AskAuth | Complete | Fail | Reject

StepFunction = Callable[[StepContext], Awaitable[StepOutcome]]


@dataclass(frozen=True)
class BoundedStep:
    """A step with its own retry policy or timeout; made by ``step``.

    Unset, each falls back to the skill's (``Skill.retry``, ``Skill.timeout``), then to the
    service's (``LONGHAUL_STEP_MAX_ATTEMPTS``, ``LONGHAUL_STEP_TIMEOUT``).
    """

    fn: StepFunction
    retry: RetryPolicy | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        _check_timeout(self.timeout, f"step {step_name(self.fn)}")

    async def __call__(self, context: StepContext) -> StepOutcome:
        """Run the step."""
        return await self.fn(context)


Step = StepFunction | BoundedStep


@overload
def step(
    fn: StepFunction, /, *, retry: RetryPolicy | None = None, timeout: timedelta | None = None
) -> BoundedStep: ...


@overload
def step(
    fn: None = None, /, *, retry: RetryPolicy | None = None, timeout: timedelta | None = None
) -> Callable[[StepFunction], BoundedStep]: ...


def step(
    fn: StepFunction | None = None,
    /,
    *,
    retry: RetryPolicy | None = None,
    timeout: timedelta | None = None,
) -> BoundedStep | Callable[[StepFunction], BoundedStep]:
    """Give one step its own retry policy or timeout: ``step(fetch, timeout=timedelta(minutes=5))``.

    Also a decorator: ``@step(retry=RetryPolicy(max_attempts=3, first_delay_s=1, max_delay_s=30))``.
    """
    if fn is None:
        return lambda function: BoundedStep(function, retry, timeout)
    return BoundedStep(fn, retry, timeout)


def step_name(step: Step) -> str:
    """The step function's name, as messages and logs name the step."""
    function = step.fn if isinstance(step, BoundedStep) else step
    return str(getattr(function, "__name__", type(function).__name__))


def _check_timeout(timeout: timedelta | None, what: str) -> None:
    if timeout is not None and timeout <= timedelta(0):
        raise ValueError(f"{what}: a timeout must be positive")


def never(first_message: JSON) -> bool:
    """The default ``Skill.answers_with_message``: every task answers with itself."""
    return False


@dataclass(frozen=True)
class Skill:
    """A named, versioned, ordered list of steps. Tasks are pinned to the version they start on.

    ``answers_with_message`` says, from a task's first message alone, whether its ``SendMessage``
    answers with a bare A2A ``Message`` (the message the task completes with) instead of the
    ``Task``. The task still runs and is logged like any other; only the answer differs. It must
    be a pure function of the message, so every gateway decides the same from the log.

    ``retry`` and ``timeout`` bound every step of the skill that sets none of its own
    (``step``); unset, the service's defaults apply.
    """

    name: str
    version: int
    steps: Sequence[Step]
    description: str = ""
    tags: Sequence[str] = ()
    answers_with_message: Callable[[JSON], bool] = never
    retry: RetryPolicy | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a skill needs a name")
        if self.version < 1:
            raise ValueError(f"skill {self.name}: versions start at 1")
        if not self.steps:
            raise ValueError(f"skill {self.name} v{self.version} has no steps")
        _check_timeout(self.timeout, f"skill {self.name} v{self.version}")


class UnknownSkillError(LookupError):
    """No registered skill (or skill version) has this name."""


class SkillRegistry:
    """An explicit registry of skills and their versions."""

    def __init__(self, skills: Sequence[Skill] = ()) -> None:
        self._skills: dict[str, dict[int, Skill]] = {}
        for skill in skills:
            self.register(skill)

    def register(self, skill: Skill) -> None:
        """Add one version of a skill; registering the same name and version twice is an error."""
        versions = self._skills.setdefault(skill.name, {})
        if skill.version in versions:
            raise ValueError(f"skill {skill.name} v{skill.version} is registered twice")
        versions[skill.version] = skill

    def newest(self, name: str) -> Skill:
        """The newest version of ``name``: the one new tasks start on."""
        versions = self._skills.get(name)
        if not versions:
            known = ", ".join(sorted(self._skills)) or "none"
            raise UnknownSkillError(f"unknown skill {name!r} (known: {known})")
        return versions[max(versions)]

    def get(self, name: str, version: int) -> Skill:
        """One exact version of a skill."""
        skill = self._skills.get(name, {}).get(version)
        if skill is None:
            raise UnknownSkillError(f"skill {name!r} v{version} is not in this release")
        return skill

    def has(self, name: str, version: int) -> bool:
        """Whether this release can run ``name`` at ``version``."""
        return version in self._skills.get(name, {})

    def all(self) -> list[Skill]:
        """Every registered skill version, sorted by name then version."""
        return [s for name in sorted(self._skills) for _, s in sorted(self._skills[name].items())]
