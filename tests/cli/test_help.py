"""Every command's ``--help`` says what it does, its options and the settings it reads most."""

from __future__ import annotations

import argparse

import pytest

from longhaul import cli
from longhaul.settings import variable_names


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_command_has_a_description(name: str) -> None:
    """A command without one: add it to ``longhaul/cli_help.py`` (or pass ``description=``)."""
    command = _subcommands()[name]
    assert command.description, f"`longhaul {name} --help` has no description"
    assert len(command.description.split()) >= 10, f"`longhaul {name}`: say what it does, in a sentence"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_and_argument_is_explained(name: str) -> None:
    command = _subcommands()[name]
    unexplained = [a.dest for a in command._actions if not a.help]
    assert unexplained == [], f"`longhaul {name}`: no help for {unexplained}"


def test_the_settings_a_help_names_are_settings() -> None:
    known = set(variable_names())
    for name, command in _subcommands().items():
        for line in (command.epilog or "").splitlines()[1:]:
            if line.startswith("   "):  # a description's next line, not a setting's first
                continue
            word = line.split()[0]
            if word.startswith("LONGHAUL_"):
                assert word in known, f"`longhaul {name} --help` names {word}, not a setting"


def test_up_help_describes_up(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "Run everything in one process" in out
    assert "LONGHAUL_DATABASE_URL" in out
    assert "LONGHAUL_DATA_DIR" in out
