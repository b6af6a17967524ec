"""The chain hash of issue 9 and the pure check of one task's stored chain (no database)."""

from __future__ import annotations

import hashlib
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from store.evidence.chain import (
    GENESIS,
    ChainFault,
    ChainRow,
    FaultKind,
    chain_hash,
    check_task,
    verify_chains,
)

TASK = UUID("12345678-1234-5678-1234-567812345678")
TOPIC = "domain.task:Task.CheckpointSaved"


def _events(n: int) -> list[tuple[str, bytes]]:
    return [(f"domain.task:Task.E{v % 3}", f'{{"n":{v},"x":"é"}}'.encode()) for v in range(1, n + 1)]


def _rows(events: list[tuple[str, bytes]], task_id: UUID = TASK) -> list[ChainRow]:
    rows, previous = [], GENESIS
    for version, (topic, state) in enumerate(events, start=1):
        previous = chain_hash(task_id, version, topic, state, previous)
        rows.append(ChainRow(version, topic, state, previous))
    return rows


def _kinds(faults: list[ChainFault]) -> list[tuple[int, FaultKind]]:
    return [(f.version, f.kind) for f in faults]


def test_the_hash_is_the_contracts_byte_layout() -> None:
    state = b'{"a":1}'
    previous = bytes(range(32))
    layout = (
        b"longhaul-chain-v1\n"
        + TASK.bytes
        + (7).to_bytes(8, "big")
        + len(TOPIC.encode()).to_bytes(4, "big")
        + TOPIC.encode()
        + len(state).to_bytes(4, "big")
        + state
        + previous
    )
    assert chain_hash(TASK, 7, TOPIC, state, previous) == hashlib.sha256(layout).digest()
    # A fixed vector (computed with printf | sha256sum; docs/audit.md gives it): a format change fails.
    assert chain_hash(TASK, 1, TOPIC, state, GENESIS).hex() == (
        "5fc52addd884673f3dd08e19c1202997c9ad150ceaaa1a575f3cbddc6a6b18a6"
    )


def test_every_field_is_in_the_hash() -> None:
    base = chain_hash(TASK, 2, TOPIC, b"{}", GENESIS)
    assert chain_hash(UUID(int=1), 2, TOPIC, b"{}", GENESIS) != base
    assert chain_hash(TASK, 3, TOPIC, b"{}", GENESIS) != base
    assert chain_hash(TASK, 2, TOPIC + "X", b"{}", GENESIS) != base
    assert chain_hash(TASK, 2, TOPIC, b"{ }", GENESIS) != base
    assert chain_hash(TASK, 2, TOPIC, b"{}", b"\x01" * 32) != base
    # The lengths keep topic and state apart: moving a byte across the boundary changes the hash.
    assert chain_hash(TASK, 2, "ab", b"c", GENESIS) != chain_hash(TASK, 2, "a", b"bc", GENESIS)


def test_an_untouched_chain_has_no_fault() -> None:
    assert check_task(TASK, _rows(_events(30))) == []
    assert check_task(TASK, []) == []


def test_one_altered_byte_is_one_fault_at_its_version() -> None:
    rows = _rows(_events(10))
    row = rows[4]
    assert row.state is not None
    rows[4] = ChainRow(row.version, row.topic, row.state.replace(b'"n":5', b'"n":6'), row.chain)
    faults = check_task(TASK, rows)
    assert _kinds(faults) == [(5, FaultKind.HASH_MISMATCH)]
    assert str(faults[0]).startswith(f"task {TASK} version 5: hash-mismatch: ")


def test_a_changed_type_is_a_mismatch() -> None:
    rows = _rows(_events(4))
    rows[1] = ChainRow(2, "domain.task:Task.Completed", rows[1].state, rows[1].chain)
    assert _kinds(check_task(TASK, rows)) == [(2, FaultKind.HASH_MISMATCH)]


def test_a_deleted_event_is_named_and_its_successor_still_checks() -> None:
    rows = _rows(_events(6))
    rows[2] = ChainRow(3, None, None, rows[2].chain)  # the event gone, its hash still stored
    assert _kinds(check_task(TASK, rows)) == [(3, FaultKind.EVENT_DELETED)]


def test_a_version_gone_with_its_hash_is_missing() -> None:
    rows = _rows(_events(6))
    del rows[2]
    assert _kinds(check_task(TASK, rows)) == [(3, FaultKind.MISSING_VERSION)]


def test_an_event_without_a_hash_is_extra() -> None:
    rows = _rows(_events(3))
    rows.append(ChainRow(4, TOPIC, b'{"forged":true}', None))
    faults = check_task(TASK, rows)
    assert _kinds(faults) == [(4, FaultKind.EXTRA_EVENT)]


def test_swapped_events_are_out_of_order_at_both_versions() -> None:
    rows = _rows(_events(8))
    a, b = rows[2], rows[5]
    rows[2] = ChainRow(3, b.topic, b.state, a.chain)
    rows[5] = ChainRow(6, a.topic, a.state, b.chain)
    faults = check_task(TASK, rows)
    assert _kinds(faults) == [(3, FaultKind.OUT_OF_ORDER), (6, FaultKind.OUT_OF_ORDER)]
    assert faults[0].detail == "holds the event of version 6"
    assert faults[1].detail == "holds the event of version 3"


def test_an_insertion_that_renumbers_names_every_moved_version() -> None:
    rows = _rows(_events(5))
    events = [(r.topic, r.state) for r in rows]
    forged = [*events[:2], (TOPIC, b'{"forged":true}'), *events[2:]]  # versions 3.. move up one
    tampered = [
        ChainRow(v, topic, state, rows[v - 1].chain if v <= 5 else None)
        for v, (topic, state) in enumerate(forged, start=1)
    ]
    faults = check_task(TASK, tampered)
    assert _kinds(faults) == [
        (3, FaultKind.HASH_MISMATCH),
        (4, FaultKind.OUT_OF_ORDER),
        (5, FaultKind.OUT_OF_ORDER),
        (6, FaultKind.OUT_OF_ORDER),
    ]
    assert [f.detail for f in faults[1:]] == [f"holds the event of version {v}" for v in (3, 4, 5)]


def test_an_altered_hash_breaks_its_own_link_and_the_next() -> None:
    rows = _rows(_events(5))
    rows[1] = ChainRow(2, rows[1].topic, rows[1].state, bytes(32))
    assert _kinds(check_task(TASK, rows)) == [(2, FaultKind.HASH_MISMATCH), (3, FaultKind.HASH_MISMATCH)]


def test_a_duplicate_version_is_named() -> None:
    rows = _rows(_events(3))
    assert _kinds(check_task(TASK, [*rows, rows[1]])) == [(2, FaultKind.DUPLICATE_VERSION)]


def test_truncation_is_not_visible_to_a_chain_alone() -> None:
    # Documented (docs/audit.md): the last events with their hashes, or a whole task, need the tree.
    assert check_task(TASK, _rows(_events(6))[:4]) == []


@given(
    n=st.integers(min_value=1, max_value=25),
    data=st.data(),
)
def test_any_one_altered_event_is_named_alone(n: int, data: st.DataObject) -> None:
    rows = _rows(_events(n))
    version = data.draw(st.integers(min_value=1, max_value=n))
    extra = data.draw(st.binary(min_size=1, max_size=8))
    row = rows[version - 1]
    assert row.state is not None
    rows[version - 1] = ChainRow(version, row.topic, row.state + extra, row.chain)
    assert _kinds(check_task(TASK, rows)) == [(version, FaultKind.HASH_MISMATCH)]


def test_verify_chains_counts_and_streams_faults() -> None:
    clean, damaged = UUID(int=1), UUID(int=2)
    bad = _rows(_events(4), damaged)
    bad[0] = ChainRow(1, bad[0].topic, b"{}", bad[0].chain)
    seen: list[ChainFault] = []
    progress: list[int] = []
    report = verify_chains(
        [(clean, _rows(_events(3), clean)), (damaged, bad)],
        on_fault=seen.append,
        on_task=lambda r: progress.append(r.tasks),
    )
    assert (report.tasks, report.events, report.faults, report.faulty_tasks) == (2, 7, 1, 1)
    assert [(f.task_id, f.version) for f in seen] == [(damaged, 1)]
    assert progress == [1, 2]


def test_a_copy_of_an_intact_event_is_named_a_copy() -> None:
    rows = _rows(_events(4))
    copy = ChainRow(5, rows[3].topic, rows[3].state, None)
    assert [(f.version, f.kind, f.detail) for f in check_task(TASK, [*rows, copy])] == [
        (5, FaultKind.EXTRA_EVENT, "a copy of the event of version 4, with no hash")
    ]
    replaced = ChainRow(2, rows[3].topic, rows[3].state, rows[1].chain)
    assert [(f.version, f.kind, f.detail) for f in check_task(TASK, [rows[0], replaced, *rows[2:]])] == [
        (2, FaultKind.HASH_MISMATCH, "replaced by a copy of the event of version 4")
    ]


@given(n=st.integers(min_value=2, max_value=20), data=st.data())
def test_any_tampering_is_named_at_exactly_the_versions_it_touched(n: int, data: st.DataObject) -> None:
    rows = _rows(_events(n))
    kind = data.draw(st.sampled_from(["alter", "delete-event", "delete-both", "swap", "append-copy"]))
    v = data.draw(st.integers(min_value=1, max_value=n))
    touched = {v}
    row = rows[v - 1]
    assert row.state is not None
    if kind == "alter":
        rows[v - 1] = ChainRow(v, row.topic, row.state + b" ", row.chain)
    elif kind == "delete-event":
        rows[v - 1] = ChainRow(v, None, None, row.chain)
    elif kind == "delete-both":
        del rows[v - 1]
        if v == n:
            touched = set()  # a truncation: not visible to a chain alone (documented)
    elif kind == "swap":
        w = data.draw(st.integers(min_value=1, max_value=n).filter(lambda x: x != v))
        other = rows[w - 1]
        rows[v - 1] = ChainRow(v, row.topic, other.state, row.chain)
        rows[w - 1] = ChainRow(w, other.topic, row.state, other.chain)
        touched = {v, w}
    else:
        rows.append(ChainRow(n + 1, row.topic, row.state, None))
        touched = {n + 1}
    assert {f.version for f in check_task(TASK, rows)} == touched
