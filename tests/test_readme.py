"""The README and the decision records say what the code does, and every doc link leads somewhere.

What ``tests/test_docs.py`` does for the tables of ``docs/``, this module does for what a
newcomer reads first and for the records of decisions:

- the README says how to get ``uv`` and shows the two commands (run the service, run the tests);
- every ``longhaul`` command the README shows exists in ``longhaul.cli._parser()``;
- every A2A method the README's "What is built" names is served, and every served one is named;
- every relative link of the README and of ``docs/`` leads to a file, and to a heading there;
- every ADR has a ``Status:`` line and a row in ``docs/adr/README.md``, and every row a file;
- no doc (ADRs included) nor the README names a session of work (``session 12``): history is
  git's, and a doc says what holds now.

The ``LONGHAUL_*`` names the README uses are checked with those of ``docs/`` by
``tests/test_docs.py::test_every_longhaul_variable_the_docs_name_is_a_setting``.
Fast and without a database. A failure names the file and what differs.
"""

from __future__ import annotations

import re
from pathlib import Path

from api.jsonrpc import METHODS
from api.streams import STREAM_METHODS
from tests.test_docs import CODE_SPAN, DOCS, README, ROOT, _prose, _section, _subcommands

ADRS = DOCS / "adr"
ADR_INDEX = ADRS / "README.md"

UV_INSTALLS = ("curl -LsSf https://astral.sh/uv/install.sh | sh", "pip install uv")
RUN_THE_SERVICE = "uv run longhaul up"
RUN_THE_TESTS = "uv run pytest"

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
"""A markdown link's target (images left out)."""

METHOD_NAME = re.compile(r"(Send|Get|List|Cancel|Create|Delete|Subscribe)[A-Z]\w*")
"""A code span that names an A2A method (the verbs of A2A 1.0's method names)."""

SESSION = re.compile(r"\bsessions? \d+", re.IGNORECASE)

ADR_STATUSES = ("accepted", "superseded by", "proposed", "rejected")
"""What a record's status starts with (``docs/adr/README.md`` says when each applies)."""


def _docs() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _fenced(text: str) -> str:
    """The fenced code blocks of a markdown text, joined."""
    return "\n".join(re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, flags=re.DOTALL | re.MULTILINE))


def _code(path: Path) -> str:
    """Everything a reader could type from a doc: its fenced blocks and its code spans."""
    return _fenced(path.read_text()) + "\n" + "\n".join(CODE_SPAN.findall(_prose(path)))


# ---------------------------------------------------------------------------------------- README


def test_the_readme_says_how_to_get_uv_and_shows_the_two_commands() -> None:
    text = README.read_text()
    blocks = _fenced(text)
    assert any(install in blocks for install in UV_INSTALLS), (
        f"README.md should show how to get uv, with one of {UV_INSTALLS} in a code block"
    )
    for command in (RUN_THE_SERVICE, RUN_THE_TESTS):
        assert re.search(rf"^{re.escape(command)}(\s|$)", blocks, flags=re.MULTILINE), (
            f"README.md should show {command!r} at the start of a line of a code block"
        )


def test_every_longhaul_command_the_readme_shows_exists() -> None:
    shown = set(re.findall(r"\blonghaul ([a-z][a-z-]*)", _code(README)))
    unknown = sorted(shown - set(_subcommands()))
    assert shown, "README.md shows no longhaul command"
    assert unknown == [], f"README.md shows commands longhaul.cli._parser() lacks: {unknown}"


def test_the_readme_names_every_served_a2a_method_and_no_other() -> None:
    served = set(METHODS) | set(STREAM_METHODS)
    built = _section(README, "## What is built")
    named = {span for span in CODE_SPAN.findall(built) if METHOD_NAME.fullmatch(span)}
    assert named == served, (
        f"README.md, What is built: not served {sorted(named - served)}, "
        f"served but not named {sorted(served - named)}"
    )


# ---------------------------------------------------------------------------------------- links


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    for line in _prose(path).splitlines():
        match = re.match(r"#+ (.+)", line)
        if match:
            anchor, n = _anchor(match.group(1)), 1
            while anchor in anchors:  # a repeated heading gets -1, -2, …
                anchor, n = f"{_anchor(match.group(1))}-{n}", n + 1
            anchors.add(anchor)
    return anchors


def test_every_relative_link_of_the_docs_leads_to_a_file_and_a_heading() -> None:
    broken = []
    for doc in _docs():
        for target in LINK.findall(_prose(doc)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            where = f"{doc.relative_to(ROOT)}: ({target})"
            if not path.exists():
                broken.append(f"{where}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{where}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert broken == [], "links that lead nowhere:\n" + "\n".join(broken)


# ---------------------------------------------------------------------------------------- ADRs


def _adr_files() -> list[Path]:
    return sorted(ADRS.glob("[0-9][0-9][0-9][0-9]-*.md"))


def test_every_adr_has_a_status() -> None:
    missing = []
    for adr in _adr_files():
        head = adr.read_text().splitlines()[:6]
        statuses = [line.removeprefix("Status:").strip() for line in head if line.startswith("Status:")]
        if not statuses or not statuses[0].lower().startswith(ADR_STATUSES):
            missing.append(f"{adr.name}: {statuses[0] if statuses else 'no Status: line under the title'}")
    assert missing == [], f"ADRs without a status starting with one of {ADR_STATUSES}:\n" + "\n".join(missing)


def test_the_adr_index_lists_every_adr_once_and_nothing_else() -> None:
    rows = [line for line in ADR_INDEX.read_text().splitlines() if re.match(r"\| \d{4} \|", line)]
    listed: dict[str, str] = {}
    for row in rows:
        number = row.split("|")[1].strip()
        links = [target for target in LINK.findall(row) if re.fullmatch(r"\d{4}-[\w-]+\.md", target)]
        assert len(links) == 1, f"docs/adr/README.md: the row of {number} should link its file once"
        assert links[0].startswith(number), f"docs/adr/README.md: the row of {number} links {links[0]}"
        assert number not in listed, f"docs/adr/README.md: {number} has two rows"
        listed[number] = links[0]
    files = {adr.name[:4]: adr.name for adr in _adr_files()}
    assert listed == files, (
        f"docs/adr/README.md: not listed {sorted(files.keys() - listed.keys())}, "
        f"listed without a file {sorted(listed.keys() - files.keys())}"
    )


def test_no_doc_names_a_session() -> None:
    """History is git's: a doc says what holds now, not which session of work found it."""
    named: dict[str, list[str]] = {}
    for doc in _docs():
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            for match in SESSION.finditer(line):
                named.setdefault(str(doc.relative_to(ROOT)), []).append(f"{number}: {match.group(0)}")
    report = [f"{doc}: {len(lines)}, first {lines[0]!r}" for doc, lines in named.items()]
    assert named == {}, "docs that name a session (how many, the first):\n" + "\n".join(report)
