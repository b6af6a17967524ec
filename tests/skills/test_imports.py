"""Skills depend on the domain and httpx only, never on other longhaul packages."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import workers.skills

ALLOWED = ("domain", "workers.skills", "httpx")


def test_skills_import_only_domain_httpx_and_the_standard_library() -> None:
    package = Path(workers.skills.__file__).parent
    offenders = []
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                allowed = any(name == a or name.startswith(a + ".") for a in ALLOWED)
                if not allowed and top not in sys.stdlib_module_names:
                    offenders.append(f"{module.name}: {name}")
    assert offenders == []
