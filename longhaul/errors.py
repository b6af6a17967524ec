"""The errors a command reports to its operator (``longhaul.cli`` prints them and sets the status)."""

from __future__ import annotations


class CommandError(Exception):
    """A command could not run; the message says why and what to do."""


class BadArgumentError(CommandError):
    """A command's argument names nothing there is (a version past the last, say): exit status 2."""
