"""The one log format of every ``longhaul`` process: text for people (default), or JSON lines.

``LONGHAUL_LOG_FORMAT=json`` writes one JSON object per line to stderr: ``time`` (UTC, ISO 8601),
``level``, ``logger``, ``message``, every ``extra`` field the call passed (``task_id``, ``worker``,
``epoch``, ...), and ``exception`` when there is one. Only the standard library is used.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
"""What every record has; whatever else a record carries came from ``extra=``."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as ``{"time", "level", "logger", "message", <extras>, "exception"?}``."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(log_format: LogFormat) -> None:
    """Send every logger's records at INFO and above to stderr, in ``log_format``."""
    # Neither format shows a record's thread, process or source line: no record looks them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per skill HTTP call is noise
