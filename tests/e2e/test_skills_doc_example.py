"""The "Testing a skill" examples of docs/skills.md pass as they are, run by pytest as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Testing a skill"


def example_files() -> list[str]:
    """The Python blocks of the section: each a complete test file the doc offers."""
    doc = (ROOT / "docs" / "skills.md").read_text()
    section = doc[doc.index(SECTION) :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    blocks = section.split("```python\n")[1:]
    return [block[: block.index("```\n")] for block in blocks]


def test_the_testing_a_skill_examples_pass_as_they_are(tmp_path: Path) -> None:
    files = example_files()
    assert len(files) == 2
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
    assert "4 passed" in done.stdout, done.stdout
