"""Static checks as tests, so that ``uv run pytest`` is the one command that runs every check.

Each check runs its tool (configured in ``pyproject.toml``) over the whole repository and fails
with the tool's own output.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    beside = BIN / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (uv sync installs the dev tools)")
    return found


def _check(*argv: str, timeout: float = 600) -> None:
    done = subprocess.run(
        [_tool(argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        command = " ".join(argv)
        pytest.fail(f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}", pytrace=False)


def test_ruff_lint() -> None:
    _check("ruff", "check", "--no-fix", ".")


def test_ruff_format() -> None:
    _check("ruff", "format", "--check", ".")


def test_mypy_strict() -> None:
    _check("mypy")  # packages and strictness come from [tool.mypy]


def test_import_contracts() -> None:
    _check("lint-imports", "--no-cache")


PRODUCT_PACKAGES = ("domain", "store", "projections", "api", "workers", "longhaul")
LONG_MODULE_LINES = 500
LONG_MODULE_REASON = "Longer than 500 lines on purpose"


def test_a_long_module_says_why_at_its_top() -> None:
    unexplained = []
    for package in PRODUCT_PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            source = module.read_text(encoding="utf-8")
            if source.count("\n") <= LONG_MODULE_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(source)) or ""
            if LONG_MODULE_REASON not in " ".join(docstring.split()):
                unexplained.append(f"{module.relative_to(ROOT)} ({source.count(chr(10))} lines)")
    assert unexplained == [], (
        f"modules over {LONG_MODULE_LINES} lines whose docstring gives no reason: {unexplained}"
    )
