"""The "Testing a skill" example of docs/skills.md passes as is, run by pytest as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Testing a skill"


def example_file() -> str:
    """The first Python block of the section: the complete test file the doc offers."""
    doc = (ROOT / "docs" / "skills.md").read_text()
    section = doc[doc.index(SECTION) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```\n", start)]


def test_the_testing_a_skill_example_passes_as_is(tmp_path: Path) -> None:
    path = tmp_path / "test_change_skill.py"
    path.write_text(example_file())

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pyproject.toml", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
