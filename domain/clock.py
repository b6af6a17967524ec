"""Time as a value: the domain never reads a clock, callers pass ``now`` in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

Clock = Callable[[], datetime]
"""Returns the current time (timezone-aware, UTC). The composition root supplies the real one."""
