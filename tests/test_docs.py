"""The docs say what the code does: their tables are compared with the code they describe.

Each test parses one markdown table (or list) and compares it with the object it documents:

- the settings table of ``docs/operations.md`` with ``longhaul.settings.Settings``;
- the CLI table of ``docs/operations.md`` and the command list of ``README.md`` with
  ``longhaul.cli._parser()``;
- the event table of ``docs/events.md`` with the events nested in ``domain.task.Task``;
- the contract table of ``docs/architecture.md`` with the import-linter contracts in
  ``pyproject.toml``, and its package table with the modules on disk;
- every ``LONGHAUL_*`` name and every repository path the docs mention with what exists.

Fast and without a database. A failure names the doc, the table and each row that differs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import DomainEvent

import domain.task
from domain.task import Task
from longhaul import cli
from longhaul.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
EVENTS = DOCS / "events.md"
ARCHITECTURE = DOCS / "architecture.md"
README = ROOT / "README.md"

ENVELOPE_FIELDS = ("originator_id", "originator_version", "timestamp", "originator_topic")
"""Fields every stored event has; docs/events.md names them once, not per event."""

# ---------------------------------------------------------------------------------------- markdown

CODE_SPAN = re.compile(r"`([^`]+)`")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def _section(path: Path, heading: str) -> str:
    """The text under ``heading`` (e.g. ``## Settings``) up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = path.read_text().splitlines()
    try:
        start = lines.index(heading) + 1
    except ValueError:
        pytest.fail(f"{path.relative_to(ROOT)} has no heading {heading!r}", pytrace=False)
    end, fenced = len(lines), False
    for index in range(start, len(lines)):
        fenced ^= lines[index].startswith("```")
        match = re.match(r"(#+) ", lines[index])
        if match and not fenced and len(match.group(1)) <= level:
            end = index
            break
    return "\n".join(lines[start:end])


def _cells(line: str) -> list[str]:
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in UNESCAPED_PIPE.split(inner)]


def _table(path: Path, heading: str, key: str) -> dict[str, dict[str, str]]:
    """The first table under ``heading`` whose header has the column ``key``: rows by their ``key`` cell.

    A cell that is one code span (`` `x` ``) is given as its content (``x``).
    """
    where = f"{path.relative_to(ROOT)} ({heading})"
    lines = _section(path, heading).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and key in _cells(line)]
    if not starts:
        pytest.fail(f"{where}: no table with a {key!r} column", pytrace=False)
    header = _cells(lines[starts[0]])
    rows: dict[str, dict[str, str]] = {}
    for line in lines[starts[0] + 2 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        if len(cells) != len(header):
            pytest.fail(f"{where}: row {line!r} has {len(cells)} cells, not {len(header)}", pytrace=False)
        row = {column: _unquoted(cell) for column, cell in zip(header, cells, strict=True)}
        if row[key] in rows:
            pytest.fail(f"{where}: {row[key]!r} has two rows", pytrace=False)
        rows[row[key]] = row
    return rows


def _unquoted(cell: str) -> str:
    match = CODE_SPAN.fullmatch(cell)
    return match.group(1) if match else cell


def _code_list(cell: str) -> list[str]:
    """The names of a cell that lists code spans separated by commas (`` `a`, `b` ``)."""
    if re.fullmatch(r"`[^`]+`(, `[^`]+`)*", cell):
        return CODE_SPAN.findall(cell)
    return [cell]  # one name (already unquoted), or not a plain list: the failure shows the cell


def _differences(where: str, expected: dict[str, Any], documented: dict[str, Any]) -> str:
    lines = [f"{where} differs from the code:"]
    for name in sorted(expected.keys() - documented.keys()):
        lines.append(f"  missing row {name}: the code has {expected[name]}")
    for name in sorted(documented.keys() - expected.keys()):
        lines.append(f"  row {name}: not in the code (documented as {documented[name]})")
    for name in sorted(expected.keys() & documented.keys()):
        if expected[name] != documented[name]:
            lines.append(f"  row {name}: the doc says {documented[name]}, the code has {expected[name]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- settings


def _iso_duration(value: timedelta) -> str:
    """``value`` as an ISO 8601 duration, the way the docs write it: ``P7D``, ``PT1H``, ``P1DT12H``."""
    days, seconds = value.days, value.seconds + value.microseconds / 1e6
    hours, rest = divmod(int(seconds), 3600)
    minutes = rest // 60
    seconds -= hours * 3600 + minutes * 60
    time = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n)
    time += f"{seconds:g}S" if seconds else ""
    text = "P" + (f"{days}D" if days else "") + (f"T{time}" if time else "")
    return text if text != "P" else "PT0S"


def doc_default(value: object) -> str:
    """A setting's default as the settings table writes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return _iso_duration(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "unset"),
        (timedelta(days=7), "P7D"),
        (timedelta(hours=1), "PT1H"),
        (timedelta(days=1, hours=12), "P1DT12H"),
        (timedelta(minutes=90, seconds=1.5), "PT1H30M1.5S"),
        (timedelta(0), "PT0S"),
        (30.0, "30"),
        (0.25, "0.25"),
        ([], "[]"),
        (Path(".longhaul"), ".longhaul"),
    ],
)
def test_defaults_are_rendered_as_the_docs_write_them(value: object, text: str) -> None:
    assert doc_default(value) == text


def test_the_settings_table_lists_every_setting_with_its_default() -> None:
    prefix = Settings.model_config.get("env_prefix", "")
    expected = {
        f"{prefix}{name}".upper(): doc_default(field.get_default(call_default_factory=True))
        for name, field in Settings.model_fields.items()
    }
    rows = _table(OPERATIONS, "## Settings", "variable")
    documented = {name: row["default"] for name, row in rows.items()}
    assert documented == expected, _differences("docs/operations.md, settings table", expected, documented)


KNOWN_NON_SETTINGS = {
    "LONGHAUL_TASKS": "the default of LONGHAUL_NATS_STREAM",
    "LONGHAUL_TEST_DATABASE_URL": "read by tests/conftest.py",
    "LONGHAUL_TEST_NATS_URL": "read by tests/conftest.py",
}


def test_every_longhaul_variable_the_docs_name_is_a_setting() -> None:
    prefix = Settings.model_config.get("env_prefix", "")
    settings = {f"{prefix}{name}".upper() for name in Settings.model_fields}
    unknown = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _doc_files()
        for name in sorted(set(re.findall(r"\bLONGHAUL_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())))
        if name not in settings and name not in KNOWN_NON_SETTINGS
    ]
    assert unknown == [], "the docs name variables longhaul.settings.Settings lacks:\n" + "\n".join(unknown)


# ---------------------------------------------------------------------------------------- CLI


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    pytest.fail("longhaul.cli._parser() has no subcommands", pytrace=False)


def _usage(parser: argparse.ArgumentParser) -> str:
    """What the CLI table shows of a command's arguments: options, then positional metavars."""
    words = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            words.append(max(action.option_strings, key=len))
        else:
            words.append(str(action.metavar or action.dest.upper()))
    return " ".join(sorted(words))


def test_the_cli_table_lists_every_command_with_its_arguments() -> None:
    expected = {name: _usage(sub) for name, sub in _subcommands().items()}
    documented = {}
    for cell in _table(OPERATIONS, "## CLI", "command"):
        name, *rest = cell.split()
        words = re.findall(r"--[\w-]+|\b[A-Z][A-Z0-9_]+\b", " ".join(rest))
        documented[name] = " ".join(sorted(words))
    assert documented == expected, _differences("docs/operations.md, CLI table", expected, documented)


def test_the_readme_names_every_command() -> None:
    marker = "`uv run longhaul --help` lists the commands"
    paragraphs = [p for p in README.read_text().split("\n\n") if marker in p]
    assert len(paragraphs) == 1, f"README.md should have one paragraph with {marker!r}"
    spans = CODE_SPAN.findall(paragraphs[0].split(marker, 1)[1])
    documented = {span.split()[0] for span in spans}
    expected = set(_subcommands())
    assert documented == expected, (
        f"README.md's command list: missing {sorted(expected - documented)}, "
        f"not commands {sorted(documented - expected)}"
    )


# ---------------------------------------------------------------------------------------- events


def _declared_in_task() -> list[str]:
    """The names of the classes written in ``Task``'s body in ``domain/task.py``, in order."""
    module = ast.parse(inspect.getsource(domain.task))
    (task,) = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Task"]
    return [n.name for n in task.body if isinstance(n, ast.ClassDef)]


def event_classes() -> dict[str, type[DomainEvent]]:
    """The concrete events of ``Task``: the events declared in its body that no other event extends.

    That leaves out ``Task.Event`` (the base of the others) and the ``Task.Created`` that
    ``eventsourcing`` adds to every aggregate (``Submitted`` is Task's created event).
    """
    declared = {name: getattr(Task, name) for name in _declared_in_task()}
    events = {name: cls for name, cls in declared.items() if issubclass(cls, DomainEvent)}
    bases = {base for cls in events.values() for base in cls.__mro__[1:]}
    return {name: cls for name, cls in events.items() if cls not in bases}


def event_fields(cls: type[DomainEvent]) -> list[str]:
    """An event's own fields, in declaration order (the envelope left out)."""
    return [f.name for f in dataclasses.fields(cls) if f.name not in ENVELOPE_FIELDS]


def test_every_concrete_event_is_found() -> None:
    found = event_classes()
    assert "Submitted" in found
    assert "Expired" in found
    assert "Event" not in found
    assert "Created" not in found
    assert event_fields(found["LeaseGranted"]) == ["worker", "epoch", "until"]


def test_the_event_table_lists_every_event_with_its_version_and_fields() -> None:
    expected = {
        name: f"class_version {getattr(cls, 'class_version', 1)}, fields {sorted(event_fields(cls))}"
        for name, cls in event_classes().items()
    }
    documented = {
        name: f"class_version {row['class_version']}, fields {sorted(_code_list(row['fields']))}"
        for name, row in _table(EVENTS, "## Event types", "event").items()
    }
    assert documented == expected, _differences("docs/events.md, event table", expected, documented)


def test_the_field_table_explains_every_event_field() -> None:
    expected = {field for cls in event_classes().values() for field in event_fields(cls)}
    documented = {field for cell in _table(EVENTS, "## Event types", "field") for field in _code_list(cell)}
    assert documented == expected, (
        f"docs/events.md, field table: missing {sorted(expected - documented)}, "
        f"in no event {sorted(documented - expected)}"
    )


# ---------------------------------------------------------------------------------------- architecture


def _tool(name: str) -> Any:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][name]


def test_the_contract_table_matches_the_import_contracts() -> None:
    roots = set(_tool("importlinter")["root_packages"])
    expected = {}
    for contract in _tool("importlinter")["contracts"]:
        if contract["type"] == "layers":
            modules = [m.strip() for layer in contract["layers"] for m in layer.split("|")]
        elif contract["type"] == "forbidden":
            externals = [m for m in contract["forbidden_modules"] if m not in roots]
            modules = contract["source_modules"] + externals
        elif contract["type"] == "protected":
            modules = [m.removesuffix(".*") + ".*" for m in contract["protected_modules"]]
            modules += [m for m in contract["allowed_importers"] if m not in roots]
        else:
            modules = contract["modules"]
        expected[contract["name"]] = modules
    documented = {
        name: CODE_SPAN.findall(row["rule"])
        for name, row in _table(ARCHITECTURE, "## Packages and layers", "contract").items()
    }
    assert documented == expected, _differences(
        "docs/architecture.md, contract table (names and the modules each rule names)", expected, documented
    )


def test_the_package_table_lists_every_module() -> None:
    rows = _table(ARCHITECTURE, "## Packages and layers", "package")
    expected = {}
    for name in rows:
        package = ROOT / name.strip("/")
        modules = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
        modules += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
        expected[name] = sorted(modules)
    documented = {name: sorted(_code_list(row["modules"])) for name, row in rows.items()}
    packages = {f"{p}/" for p in _tool("importlinter")["root_packages"]}
    packages |= {f"store/{p.name}/" for p in (ROOT / "store").iterdir() if (p / "__init__.py").is_file()}
    assert set(rows) == packages, "docs/architecture.md, package table: not one row per package"
    assert documented == expected, _differences("docs/architecture.md, package table", expected, documented)


# ---------------------------------------------------------------------------------------- paths


def _doc_files() -> list[Path]:
    return [README, ROOT / "bench" / "README.md", *sorted(DOCS.rglob("*.md"))]


def _prose(path: Path) -> str:
    """A doc without its fenced code blocks, indented ones too (their backticks pair with prose)."""
    return re.sub(r"^[ \t]*```.*?^[ \t]*```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)


def _checked_folders() -> set[str]:
    """Where a checked path may start: a top-level folder of the repository, or one of ``tests/``."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    tests = {p.name for p in (ROOT / "tests").iterdir() if (p / "__init__.py").is_file()}
    return top | tests | {".ci"}


def _generated(path: str) -> bool:
    """Whether ``path`` is under a folder ``.gitignore`` names from the root (``/bench/results/``):
    output a command writes (the benchmarks' result file), never committed."""
    folders = [
        line for line in (ROOT / ".gitignore").read_text().splitlines() if re.fullmatch(r"/[\w/.-]+/", line)
    ]
    return any(f"/{path}".startswith(folder) for folder in folders)


def _exists(path: str) -> bool:
    """Whether ``path`` is a file or folder of the repository, from its root or from ``tests/``."""
    return (ROOT / path).exists() or (ROOT / "tests" / path).exists() or _generated(path)


def test_every_repository_path_the_docs_name_exists() -> None:
    """Paths such as `` `store/log/run_queue.py` `` or `` `crash/test_zombie.py::name` `` (from ``tests/``).

    Only paths that start in a top-level folder of the repository (or a test folder) are
    checked; bare file names and examples (``my_agents/skills.py``) are not.
    """
    folders, missing = _checked_folders(), []
    for doc in _doc_files():
        for span in CODE_SPAN.findall(_prose(doc)):
            path, _, name = span.partition("::")
            if not re.fullmatch(r"[\w./-]+", path) or "/" not in path:
                continue
            if path.split("/")[0] not in folders:
                continue
            where = f"{doc.relative_to(ROOT)}: `{span}`"
            if not _exists(path):
                missing.append(f"{where}: no such path")
            elif name and re.fullmatch(r"\w+(::\w+)*", name):
                file = ROOT / path if (ROOT / path).is_file() else ROOT / "tests" / path
                source = file.read_text()
                if not all(re.search(rf"\b(def|class) {part}\b", source) for part in name.split("::")):
                    missing.append(f"{where}: no {name} in {path}")
    assert missing == [], "the docs name paths that do not exist:\n" + "\n".join(missing)


# ---------------------------------------------------------------------------------------- use cases

USE_CASE_NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def test_every_use_case_the_architecture_names_exists() -> None:
    rows = _table(ARCHITECTURE, "## Use cases: where each one lives", "use case")
    assert rows, "docs/architecture.md has no use case table"
    missing = []
    for use_case, row in rows.items():
        homes = [importlib.import_module(row["package"].strip("`"))]
        homes += [importlib.import_module(face) for face in ("store.log", "store.evidence")]
        for name in USE_CASE_NAME.findall(row["method"]) or [row["method"]]:
            if not any(callable(_resolve(home, name)) for home in homes):
                missing.append(f"{use_case}: {name}")
    assert missing == [], f"docs/architecture.md names use cases the code lacks: {missing}"


def _resolve(home: object, name: str) -> object:
    """``name`` looked up from ``home`` (``Class.method``), or as a module path (``a.b.function``)."""
    found: object = home
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is None and "." in name:
        module, _, attribute = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attribute, None)
        except ImportError:
            return None
    return found
