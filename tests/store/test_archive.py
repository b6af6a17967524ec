"""Archive then purge: expired tasks go to a verified file first, and only then leave the store.

A task is archived once a signed checkpoint covers its last event: each test signs one with
``catch_up`` (as the sequencer would) before it archives, except where it shows what is left.
"""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from domain.task import Task
from longhaul.cli import main
from projections.file_index import FileIndexRecorder
from projections.retention_index import INDEX_TABLE, open_index
from projections.task_view import VIEW_TABLE, open_view
from store.deliveries.records import DELIVERIES, Attempt, DeliveryRecorder, NewDelivery, task_deliveries
from store.evidence.archive import PURGED_WITH_THE_TASK, ArchiveError, archive_expired, read_archive
from store.evidence.file_retention import ERASED_TASKS_TABLE
from store.evidence.merkle_log import catch_up
from store.evidence.receipts import verify_receipt
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.log.errors import TaskNotFoundError
from store.log.postgres import CHAIN_TABLE, PostgresRunQueueRecorder
from tests.support.projector import projector_running
from tests.support.tasks import new_task

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)
LATER = START + RETENTION + timedelta(days=1)


SIGNER = SignerKey.generate("longhaul/test")


def clock() -> datetime:
    return LATER


def _signed(store: TaskApplication) -> None:
    """Sequence every event and sign a checkpoint of them (what the sequencer does as it runs)."""
    log = store.merkle_log
    assert log is not None
    catch_up(log, store.recorder.select_notifications, SIGNER, LATER)


def _expired(store: TaskApplication, tenant: str = "acme") -> Task:
    task = new_task(START, tenant=tenant)
    task.grant_lease(worker="w", now=START, until=START + timedelta(seconds=30))
    task.cancel(now=START, reason="test")
    store.save_tasks(task)
    return store.expire(task.id, retention=RETENTION, clock=clock)


def _ended(store: TaskApplication) -> Task:
    task = new_task(LATER)
    task.cancel(now=LATER, reason="test")
    store.save_tasks(task)
    return task


def _gone(store: TaskApplication, task_id: UUID) -> bool:
    view, index = open_view(store), open_index(store)
    assert view is not None
    assert index is not None
    try:
        store.get(task_id)
    except TaskNotFoundError:
        rows = (store.run_queue.row(task_id), view.row(task_id), index.row(task_id))
        return rows == (None, None, None)
    return False


def _recorder(store: TaskApplication) -> PostgresRunQueueRecorder:
    assert isinstance(store.recorder, PostgresRunQueueRecorder)
    return store.recorder


def test_expired_tasks_are_archived_complete_then_purged(store: TaskApplication, tmp_path: Path) -> None:
    expired = [_expired(store, tenant) for tenant in ("acme", "globex")]
    kept = _ended(store)
    view, index = open_view(store), open_index(store)
    assert view is not None
    assert index is not None
    view.rebuild(store)
    index.rebuild(store)
    assert view.row(expired[0].id) is not None
    assert index.row(expired[0].id) is not None
    stored = {t.id: list(_recorder(store).select_events(t.id)) for t in expired}

    _signed(store)
    run = archive_expired(store, tmp_path / "archives", clock=clock)

    assert run.path is not None
    assert run.path.parent == tmp_path / "archives"
    assert run.path.name.endswith(".jsonl.gz")
    assert sorted(run.purged) == sorted(t.id for t in expired)
    assert all(_gone(store, t.id) for t in expired)
    assert store.get(kept.id).state == "TASK_STATE_CANCELED"  # not expired: untouched
    archive = read_archive(run.path)
    assert archive.header["schema"] == _recorder(store).datastore.schema
    assert archive.header["formatVersion"] == 4
    assert len(archive.tasks) == 2
    for task in expired:
        events = archive.tasks[task.id]
        assert [e.tenant for e in events] == [task.tenant] * len(events)
        assert [(e.version, e.topic) for e in events] == [
            (s.originator_version, s.topic) for s in stored[task.id]
        ]
        assert [e.stored() for e in events] == stored[task.id]  # the JSON as stored, compactly
    assert list(tmp_path.glob("archives/*.partial")) == []
    # Nothing is left to archive.
    assert archive_expired(store, tmp_path / "archives", clock=clock).path is None


def test_a_run_stopped_before_the_purge_leaves_the_store_whole(
    store: TaskApplication, tmp_path: Path
) -> None:
    task = _expired(store)

    def crash(_: Path) -> None:
        raise RuntimeError("killed")

    _signed(store)
    with pytest.raises(RuntimeError, match="killed"):
        archive_expired(store, tmp_path, clock=clock, before_verify=crash)
    assert store.get(task.id).expired  # still there
    (first,) = tmp_path.glob("*.jsonl.gz")

    _signed(store)
    run = archive_expired(store, tmp_path, clock=lambda: LATER + timedelta(seconds=1))
    assert run.purged == [task.id]
    assert run.path is not None
    assert run.path != first
    assert _gone(store, task.id)
    # Archived twice (documented): both files hold it, complete.
    assert read_archive(first).tasks[task.id] == read_archive(run.path).tasks[task.id]


def test_a_run_stopped_mid_purge_is_finished_by_the_next(
    store: TaskApplication, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = [_expired(store) for _ in range(3)]
    recorder = _recorder(store)
    purge = recorder.purge
    calls: list[UUID] = []

    def dies_on_the_second(task_id: UUID, **kwargs: Any) -> bool:
        calls.append(task_id)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return purge(task_id, **kwargs)

    monkeypatch.setattr(recorder, "purge", dies_on_the_second)
    _signed(store)
    with pytest.raises(RuntimeError, match="killed"):
        archive_expired(store, tmp_path / "a", clock=clock)
    monkeypatch.undo()
    assert _gone(store, calls[0])
    left = {t.id for t in tasks} - {calls[0]}
    assert not any(_gone(store, t) for t in left)

    _signed(store)
    run = archive_expired(store, tmp_path / "b", clock=clock)
    assert run.path is not None
    assert set(read_archive(run.path).tasks) == left  # only what was still there
    assert all(_gone(store, t.id) for t in tasks)


def _corrupt(path: Path) -> None:
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"version":1', b'"version":1 ', 1)  # still valid JSON, other bytes
    path.write_bytes(gzip.compress(b"".join(lines)))


def _truncate(path: Path) -> None:
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    path.write_bytes(gzip.compress(b"".join(lines[:-2])))


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "says"), [(_corrupt, "sha256"), (_truncate, "truncated"), (_garble, "unreadable")]
)
def test_nothing_is_purged_unless_the_file_verifies(
    store: TaskApplication, tmp_path: Path, damage: Any, says: str
) -> None:
    tasks = [_expired(store) for _ in range(2)]
    _signed(store)
    with pytest.raises(ArchiveError, match=says):
        archive_expired(store, tmp_path, clock=clock, before_verify=damage)
    assert all(store.get(t.id).expired for t in tasks)


def test_the_cli_archives_and_history_replays_from_the_file(
    store: TaskApplication,
    store_config: StoreConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in os.environ if n.startswith("LONGHAUL_") and "TEST" not in n]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LONGHAUL_DATABASE_URL", store_config.database_url)
    monkeypatch.setenv("LONGHAUL_DATABASE_SCHEMA", store_config.schema)
    monkeypatch.setenv("LONGHAUL_FILE_STORE_URL", (tmp_path / "files").as_uri())
    task = _expired(store)
    for flags in ([], ["--json"]):
        assert main(["history", str(task.id), *flags]) == 0
    from_store = capsys.readouterr().out

    _signed(store)
    assert main(["archive", "--to", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    path = Path(out.strip())
    assert path.is_file()
    assert "archived 1 tasks" in err
    assert "purged 1" in err
    assert main(["history", str(task.id)]) == 1  # gone from the store

    for flags in ([], ["--json"]):
        assert main(["history", "--archive", str(path), str(task.id), *flags]) == 0
    assert capsys.readouterr().out == from_store
    assert main(["history", "--archive", str(path), str(UUID(int=1))]) == 1
    assert "no task" in capsys.readouterr().err


def test_history_refuses_a_file_that_is_no_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"type":"header","format":"other"}\n'))
    assert main(["history", "--archive", str(path), str(UUID(int=1))]) == 1
    assert "not a longhaul-archive file" in capsys.readouterr().err


def test_the_projector_follows_the_log_across_the_purged_gap(
    store: TaskApplication, store_config: StoreConfig, tmp_path: Path
) -> None:
    before = _ended(store)
    purged = _expired(store)
    after = _ended(store)  # its events come after the gap in the notification log
    _signed(store)
    archive_expired(store, tmp_path, clock=clock)
    end = store.recorder.max_notification_id() or 0
    with projector_running(store_config) as runner:
        runner.wait(end, timeout=30)
    view = open_view(store)
    assert view is not None
    assert {r.task_id for r in view.rows()} == {before.id, after.id}
    assert view.lag(store).behind == 0
    assert _gone(store, purged.id)


def test_a_task_is_purged_only_at_the_archived_version(store: TaskApplication) -> None:
    task = _expired(store)
    recorder = _recorder(store)
    assert not recorder.purge(task.id, version=task.version - 1, archive_file="a.jsonl.gz", purged_at=LATER)
    assert store.get(task.id).expired
    assert recorder.purge(task.id, version=task.version, archive_file="a.jsonl.gz", purged_at=LATER)
    assert _gone(store, task.id)
    assert not recorder.purge(task.id, version=task.version, archive_file="b.jsonl.gz", purged_at=LATER)
    log = store.merkle_log
    assert log is not None
    (purged,) = log.purged_tasks().values()  # recorded by the purge's transaction, once
    assert (purged.task_id, purged.last_version, purged.archive_file) == (task.id, task.version, "a.jsonl.gz")
    assert purged.purged_at == LATER


async def test_an_archived_task_leaves_no_webhook_delivery_behind(
    store: TaskApplication, tmp_path: Path
) -> None:
    expired, kept = _expired(store), _ended(store)
    config = store.config
    assert isinstance(config, StoreConfig)
    recorder = DeliveryRecorder(config.database_url, config.schema, pool_size=1)
    await recorder.open()
    try:
        new = [
            NewDelivery(
                f"msg_{t.id.hex}", t.id, "acme", 3, "Canceled", START, "c", "https://example.com", "{}"
            )
            for t in (expired, kept)
        ]
        recorded = await recorder.record(new, START, claimant="me", lease=timedelta(seconds=30))
        for delivery in recorded.claimed:
            attempt = Attempt(1, START, 1.0, 200, None, "delivered", "me")
            assert await recorder.finish(delivery, attempt, state="delivered")
    finally:
        await recorder.close()

    _signed(store)
    archive_expired(store, tmp_path, clock=clock)

    with psycopg.connect(config.database_url, autocommit=True) as conn:
        assert task_deliveries(conn, config.schema, expired.id) == []  # its attempts went with it
        assert [d.state for d, _ in task_deliveries(conn, config.schema, kept.id)] == ["delivered"]
        (attempts,) = conn.execute(
            f'SELECT count(*) FROM "{config.schema}".longhaul_delivery_attempts'
        ).fetchone() or (None,)
        assert attempts == 1


def test_each_task_ends_with_the_receipt_of_its_last_event_and_is_recorded_as_purged(
    store: TaskApplication, tmp_path: Path
) -> None:
    tasks = [_expired(store) for _ in range(2)]
    _signed(store)
    run = archive_expired(store, tmp_path, clock=clock)
    assert run.path is not None
    archive = read_archive(run.path)
    assert archive.header["formatVersion"] == 4
    lines = [line for line in gzip.decompress(run.path.read_bytes()).splitlines() if b'"taskId"' in line]
    for task in tasks:
        receipt = archive.receipts[task.id]
        events = archive.tasks[task.id]
        assert (receipt.task_id, receipt.version, receipt.chain_hash) == (
            task.id,
            events[-1].version,
            events[-1].chain,
        )
        assert verify_receipt(receipt, str(SIGNER.verifier())).valid
        mine = [line for line in lines if str(task.id).encode() in line]
        assert b'"type":"receipt"' in mine[-1]  # after the task's events
    log = store.merkle_log
    assert log is not None
    purged = log.purged_tasks()
    assert {t: (p.last_version, p.archive_file) for t, p in purged.items()} == {
        t.id: (archive.tasks[t.id][-1].version, run.path.name) for t in tasks
    }


def test_a_task_no_signed_checkpoint_covers_yet_is_left_for_a_later_run(
    store: TaskApplication, tmp_path: Path
) -> None:
    covered = _expired(store)
    _signed(store)
    late = _expired(store)  # expired after the last checkpoint
    run = archive_expired(store, tmp_path, clock=clock)
    assert run.path is not None
    assert run.purged == [covered.id]
    assert run.unsequenced == [late.id]
    assert set(read_archive(run.path).tasks) == {covered.id}
    assert store.get(late.id).expired  # still in the store

    assert archive_expired(store, tmp_path / "b", clock=clock).path is None  # still not covered
    _signed(store)
    later = archive_expired(store, tmp_path / "c", clock=clock)
    assert later.purged == [late.id]
    assert later.unsequenced == []


def test_a_task_whose_chain_has_a_fault_is_refused_and_stays(
    store: TaskApplication, store_config: StoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = _expired(store), _expired(store)
    _signed(store)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{store_config.schema}".{CHAIN_TABLE} SET hash = sha256(hash)'
            " WHERE task_id = %s AND version = 2",
            (bad.id,),
        )
    run = archive_expired(store, tmp_path, clock=clock)
    assert run.path is not None
    assert run.purged == [good.id]
    assert list(run.refused) == [bad.id]
    assert [fault.split(": ")[:2] for fault in run.refused[bad.id]] == [
        [f"task {bad.id} version 2", "hash-mismatch"],
        [f"task {bad.id} version 3", "hash-mismatch"],
    ]
    assert bad.id not in read_archive(run.path).tasks
    assert store.get(bad.id).expired  # not purged
    log = store.merkle_log
    assert log is not None
    assert set(log.purged_tasks()) == {good.id}


def test_the_cli_says_what_it_left_and_refused_and_exits_1_on_a_refusal(
    store: TaskApplication,
    store_config: StoreConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in os.environ if n.startswith("LONGHAUL_") and "TEST" not in n]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LONGHAUL_DATABASE_URL", store_config.database_url)
    monkeypatch.setenv("LONGHAUL_DATABASE_SCHEMA", store_config.schema)
    monkeypatch.setenv("LONGHAUL_FILE_STORE_URL", (tmp_path / "files").as_uri())
    good, bad = _expired(store), _expired(store)
    _signed(store)
    late = _expired(store)
    assert main(["archive", "--to", str(tmp_path)]) == 0  # good and bad archived, late left
    out, err = capsys.readouterr()
    assert Path(out.strip()).is_file()
    assert "archived 2 tasks" in err
    assert "; 1 not yet in a signed checkpoint and stay" in err
    assert store.get(late.id).expired
    assert _gone(store, good.id)
    assert _gone(store, bad.id)

    _signed(store)
    with psycopg.connect(store_config.database_url, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{store_config.schema}".{CHAIN_TABLE} SET hash = sha256(hash)'
            " WHERE task_id = %s AND version = 1",
            (late.id,),
        )
    assert main(["archive", "--to", str(tmp_path / "b")]) == 1
    out, err = capsys.readouterr()
    assert out == "nothing archived; 1 refused for faults (named above), not archived\n"
    assert f"refused: task {late.id} version 1: hash-mismatch" in err
    assert store.get(late.id).expired


def test_a_purge_takes_the_tasks_rows_of_the_views_and_its_deliveries() -> None:
    """The store names the views' tables itself (it cannot import projections): they must agree."""
    assert set(PURGED_WITH_THE_TASK) == {
        VIEW_TABLE,
        INDEX_TABLE,
        DELIVERIES,
        FileIndexRecorder.view_table,
        ERASED_TASKS_TABLE,
    }
