"""The complete test files of docs/skills.md pass as they are, run by pytest as a user runs them.

A complete file is a Python block of the sections below that starts with its module docstring;
the other blocks are excerpts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("## Files", "## Testing a skill")


def example_files() -> list[str]:
    """The complete test files the sections offer, in the order of the doc."""
    doc = (ROOT / "docs" / "skills.md").read_text()
    files = []
    for title in SECTIONS:
        section = doc[doc.index(title) :]
        end = section.find("\n## ", 1)
        section = section if end < 0 else section[:end]
        blocks = [block[: block.index("```\n")] for block in section.split("```python\n")[1:]]
        files += [block for block in blocks if block.startswith('"""')]
    return files


def test_the_testing_a_skill_examples_pass_as_they_are(tmp_path: Path) -> None:
    files = example_files()
    assert len(files) == 3
    for number, text in enumerate(files):
        (tmp_path / f"test_doc_example_{number}.py").write_text(text)
    path = tmp_path

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pyproject.toml", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout, done.stdout
