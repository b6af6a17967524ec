"""The auditor's modules import the standard library and ``cryptography`` only, never longhaul.

An auditor copies ``store/evidence/merkle.py``, ``store/evidence/signed_notes.py``,
``store/evidence/checkpoints.py`` or
``store/evidence/receipts.py`` out of the repository and checks longhaul's proofs with them; an import of
any other package (longhaul's own above all) would break that. Parsed, not imported, so an import
inside a function or behind ``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AUDITOR_MODULES = (
    "store/evidence/merkle.py",
    "store/evidence/signed_notes.py",
    "store/evidence/checkpoints.py",
    "store/evidence/receipts.py",
)
ALLOWED = frozenset(sys.stdlib_module_names) | {"__future__", "cryptography"}


def imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add("." if node.level else (node.module or "").split(".")[0])
    return roots


@pytest.mark.parametrize("path", AUDITOR_MODULES)
def test_an_auditor_module_imports_only_the_standard_library_and_cryptography(path: str) -> None:
    roots = imported_roots((ROOT / path).read_text())
    assert roots - ALLOWED == set(), f"{path} imports {sorted(roots - ALLOWED)}"


def test_the_check_sees_longhaul_and_relative_imports() -> None:
    source = "import store.evidence.merkle\nfrom . import x\ndef f():\n    from domain.task import Task\n"
    assert imported_roots(source) - ALLOWED == {"store", ".", "domain"}
