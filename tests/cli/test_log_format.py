"""One log format for every part: text by default, JSON lines with ``LONGHAUL_LOG_FORMAT=json``."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from uuid import uuid4

from longhaul.logs import JsonFormatter


def test_a_json_line_has_time_level_logger_message_and_the_extra_fields() -> None:
    task_id = uuid4()
    record = logging.LogRecord(
        "workers.worker", logging.INFO, __file__, 1, "task %s claimed", (task_id,), None
    )
    record.task_id = task_id
    record.epoch = 3

    entry = json.loads(JsonFormatter().format(record))

    assert entry.pop("time").endswith("+00:00")
    assert entry == {
        "level": "INFO",
        "logger": "workers.worker",
        "message": f"task {task_id} claimed",
        "task_id": str(task_id),
        "epoch": 3,
    }


def test_a_json_line_carries_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in entry["exception"]


def _run(**env_overrides: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    # memory store: `migrate` refuses at once, after a warning for the unknown variable
    env.update(LONGHAUL_STORE="memory", LONGHAUL_BOGUS="1", **env_overrides)
    return subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_format_writes_only_json_lines_on_stderr() -> None:
    done = _run(LONGHAUL_LOG_FORMAT="json")

    entries = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["level"], e["logger"]) for e in entries] == [("WARNING", "longhaul"), ("ERROR", "longhaul")]
    assert "LONGHAUL_BOGUS is not a setting" in entries[0]["message"]
    assert "needs LONGHAUL_STORE=postgres" in entries[1]["message"]
    assert done.returncode == 1


def test_text_format_is_the_default() -> None:
    done = _run()

    warning, error = done.stderr.splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING longhaul: LONGHAUL_BOGUS is not a setting.*", warning
    )
    assert error.startswith("longhaul: `longhaul migrate` needs LONGHAUL_STORE=postgres")
    assert done.returncode == 1
