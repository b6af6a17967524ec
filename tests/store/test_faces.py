"""Each store package's face: every name it promises loads, from the module it names, in a fresh process.

The faces load their names on first use (``store/log/__init__.py``), so a typo in a face, or a
name moved without its face, shows only when something asks for it; these tests ask for all.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = [
    "store.log",
    "store.evidence",
    "store.deliveries",
    "store.secrets",
    "store.public_form",
    "store.files",
]


def _homes(face: str) -> dict[str, str]:
    homes = importlib.import_module(face)._HOMES
    assert isinstance(homes, dict)
    return homes


def _type_checking_imports(face: str) -> dict[str, str]:
    source = (ROOT / face.replace(".", "/") / "__init__.py").read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                assert statement.module
                for alias in statement.names:
                    found[alias.asname or alias.name] = statement.module
    return found


@pytest.mark.parametrize("face", FACES)
def test_a_faces_table_and_its_typed_imports_agree(face: str) -> None:
    assert _homes(face) == _type_checking_imports(face)


@pytest.mark.parametrize("face", FACES)
def test_every_name_of_a_face_loads_from_its_home_in_a_fresh_process(face: str) -> None:
    names = sorted(_homes(face))
    script = f"from {face} import {', '.join(names)}\nimport {face}\nassert {face}.__name__"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    for name in names:
        assert getattr(importlib.import_module(face), name) is getattr(
            importlib.import_module(_homes(face)[name]), name
        )


def test_a_name_a_face_does_not_hold_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        importlib.import_module("store.log").nothing_here  # noqa: B018 - the lookup is the test
