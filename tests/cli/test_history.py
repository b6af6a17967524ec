"""``longhaul history``: actors, ``--at-version``, ``--effects``, ``--json``, ``--archive``, pipes.

On a real PostgreSQL, with the task of ``tests/support/audited_task.py`` (a client with API keys,
a pause and its answer, a worker that died holding its lease and its successor, a log past a
snapshot). The state printed at a version equals a fold of the first N events written out by the
test; the same from an archive file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from domain.task import Task
from longhaul.cli import main
from store.evidence.merkle_log import catch_up
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.public_form.event_json import dumps
from store.public_form.task_state import task_state_json
from tests.support.audited_task import (
    CLIENT_KEY,
    PROGRESS_REPORTS,
    SKILL,
    AuditedTask,
    Clock,
    paused_resumed_crashed,
    replayed,
)

JSON = dict[str, Any]
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def audited(postgres_store: TaskApplication) -> AuditedTask:
    return paused_resumed_crashed(postgres_store)


def _as_json(value: Any) -> Any:
    return json.loads(dumps(value))


def _milestones(audited: AuditedTask) -> list[int]:
    points = {1, audited.paused_at, audited.paused_at + 1, audited.crashed_after, audited.crashed_after + 1}
    return sorted(points | {audited.last - 1, audited.last})


def test_every_event_is_a_line_with_its_actor(cli: Cli, audited: AuditedTask) -> None:
    code, out, err = cli("history", str(audited.task_id))

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == audited.last
    assert lines[0].startswith("v1 ")
    assert "Submitted" in lines[0]
    assert f"client acme (key {CLIENT_KEY})" in lines[0]
    assert f'"key_id": "{CLIENT_KEY}"' in lines[0]
    granted = [line for line in lines if " LeaseGranted " in line]
    assert [
        ("worker w-1 (epoch 1)" in g, "worker w-2 (epoch 2)" in g, "worker w-3 (epoch 3)" in g)
        for g in granted
    ] == [
        (True, False, False),
        (False, True, False),
        (False, False, True),
    ]
    # w-2's claim, its progress reports, and its attempt that w-3's claim found lost (w-2 was killed).
    assert sum("worker w-2 (epoch 2)" in line for line in lines) == 1 + PROGRESS_REPORTS + 1
    (lost,) = [line for line in lines if " StepAttemptFailed " in line]
    assert "worker w-2 (epoch 2)" in lost
    assert '"cause": "lease_lost"' in lost
    assert "secret-token" not in out


def test_json_is_one_document_of_every_event(
    cli: Cli, audited: AuditedTask, postgres_store: TaskApplication
) -> None:
    code, out, _ = cli("history", str(audited.task_id), "--json")

    assert code == 0
    document = json.loads(out)
    assert (document["taskId"], document["tenant"]) == (str(audited.task_id), "acme")
    events = document["events"]
    assert [e["version"] for e in events] == list(range(1, audited.last + 1))
    assert [e["type"] for e in events] == [type(e).__name__ for e in postgres_store.history(audited.task_id)]
    kinds = {e["type"]: e["actor"]["kind"] for e in events}
    assert kinds["Submitted"] == kinds["InputReceived"] == kinds["PushConfigRemoved"] == "client"
    assert kinds["ProgressReported"] == kinds["EffectRecorded"] == kinds["Completed"] == "worker"
    assert events[-1]["actor"] == {
        "kind": "worker",
        "workerId": "w-3",
        "epoch": 3,
        "text": "worker w-3 (epoch 3)",
    }


def test_at_version_prints_the_state_of_a_replay(
    cli: Cli, audited: AuditedTask, postgres_store: TaskApplication
) -> None:
    events = list(postgres_store.history(audited.task_id))

    for version in _milestones(audited):
        expected = _as_json(task_state_json(replayed(events, version)))
        code, out, err = cli("history", str(audited.task_id), "--at-version", str(version), "--json")
        assert (code, err) == (0, ""), version
        assert json.loads(out) == expected, version
        code, text, _ = cli("history", str(audited.task_id), "--at-version", str(version))
        assert code == 0
        assert json.loads(text) == expected, version
        assert len(text.splitlines()) > 1  # indented for reading

    code, out, _ = cli("history", str(audited.task_id), "--at-version", str(audited.paused_at), "--json")
    paused = json.loads(out)
    assert paused["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert paused["longhaul"]["pause"]["onDeadline"] == "fail"
    assert paused["longhaul"]["lease"] is None


def test_effects_lists_each_with_its_result_and_time(
    cli: Cli, audited: AuditedTask, postgres_store: TaskApplication
) -> None:
    recorded = [e for e in postgres_store.history(audited.task_id) if isinstance(e, Task.EffectRecorded)]

    code, out, _ = cli("history", str(audited.task_id), "--effects")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:3] == [
        f"v{recorded[0].originator_version}",
        dumps(recorded[0].timestamp)[1:-1],
        "revoke:alice",
    ]
    assert lines[0].endswith('{"revoked": true, "id": 7}')

    code, out, _ = cli("history", str(audited.task_id), "--effects", "--json")
    assert code == 0
    assert json.loads(out) == {
        "taskId": str(audited.task_id),
        "effects": [
            {
                "key": e.key,
                "result": e.result,
                "time": dumps(e.timestamp)[1:-1],
                "version": e.originator_version,
            }
            for e in recorded
        ],
    }


def test_a_task_without_effects_says_so(cli: Cli, postgres_store: TaskApplication) -> None:
    message = {"messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "nothing"}]}
    task = postgres_store.submit(tenant="acme", message=message, skill=SKILL, clock=Clock())

    code, out, _ = cli("history", str(task.id), "--effects")

    assert code == 0
    assert out.strip() == f"task {task.id} recorded no run-once side effects"


@pytest.mark.parametrize("version", ["0", "-2", "abc", "1.5", ""])
def test_a_version_that_is_no_version_exits_2(
    cli: Cli, audited: AuditedTask, version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["history", str(audited.task_id), "--at-version", version])

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--at-version" in err
    assert "is not a version" in err


def test_a_version_past_the_last_exits_2_naming_the_versions(cli: Cli, audited: AuditedTask) -> None:
    code, out, err = cli("history", str(audited.task_id), "--at-version", str(audited.last + 1))

    assert (code, out) == (2, "")
    assert f"versions 1 to {audited.last}; there is no version {audited.last + 1}" in err
    assert "Traceback" not in err


def test_at_version_and_effects_go_alone(cli: Cli, audited: AuditedTask) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["history", str(audited.task_id), "--at-version", "1", "--effects"])

    assert exited.value.code == 2


def test_the_same_reads_from_an_archive_file(
    cli: Cli, audited: AuditedTask, postgres_store: TaskApplication, tmp_path: Path
) -> None:
    postgres_store.expire(
        audited.task_id, retention=timedelta(0), clock=Clock(now=Clock().now + timedelta(days=1))
    )
    reads = [
        ["--json"],
        ["--effects"],
        ["--effects", "--json"],
        *(["--at-version", str(v), "--json"] for v in _milestones(audited)),
    ]
    from_store = [cli("history", str(audited.task_id), *flags) for flags in reads]
    log = postgres_store.merkle_log
    assert log is not None  # a task is archived once a signed checkpoint covers it
    catch_up(
        log, postgres_store.recorder.select_notifications, SignerKey.generate("longhaul/t"), datetime.now(UTC)
    )

    code, out, _ = cli("archive", "--to", str(tmp_path))
    assert code == 0
    path = Path(out.strip())
    assert cli("history", str(audited.task_id))[0] == 1  # purged from the store

    from_archive = [cli("history", "--archive", str(path), str(audited.task_id), *flags) for flags in reads]
    assert from_archive == from_store
    code, _, err = cli(
        "history", "--archive", str(path), str(audited.task_id), "--at-version", str(audited.last + 2)
    )
    assert code == 2
    assert f"versions 1 to {audited.last + 1}" in err  # Expired is the last version now


def _env(store_config: StoreConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env["LONGHAUL_DATABASE_URL"] = store_config.database_url
    env["LONGHAUL_DATABASE_SCHEMA"] = store_config.schema
    return env


@pytest.mark.parametrize("flags", [[], ["--json"], ["--effects"], ["--at-version", "2"]])
def test_piped_into_head_it_ends_quietly(
    audited: AuditedTask, store_config: StoreConfig, flags: list[str]
) -> None:
    """The shell pipeline an operator types: the pipeline succeeds, and nothing is said on stderr."""
    command = " ".join([f'"{sys.executable}" -m longhaul.cli history {audited.task_id}', *flags])
    done = subprocess.run(
        ["bash", "-c", f"{command} | head -c 40"],
        env=_env(store_config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0
    assert done.stderr == ""
    assert len(done.stdout) == 40


def test_an_unknown_task_exits_1(cli: Cli, postgres_store: TaskApplication) -> None:
    code, _, err = cli("history", str(UUID(int=99)), "--at-version", "1")

    assert code == 1
    assert "no task" in err
