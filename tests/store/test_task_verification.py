"""The verification status of one task on PostgreSQL: its chain, and the signed checkpoint covering it.

A task is verified once a checkpoint covers it; pending before; a changed byte fails the chain at
that version; a changed event whose chain rows were rewritten to match (the chain alone checks)
fails the checkpoint, naming every version from the altered one; a checkpoint signed by another
key fails; without a Merkle log (memory) or a verifier key the checkpoint cannot be checked.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.task import Task
from store.evidence.merkle_log import MerkleLog, catch_up
from store.evidence.signed_notes import SignerKey
from store.evidence.task_verification import Status, verify_task
from store.log.application import TaskApplication
from store.log.config import MemoryConfig
from tests.support.tampering import alter_event, flip_byte, rechain
from tests.support.tasks import new_task

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
UNTIL = START + timedelta(minutes=5)
SIGNER = SignerKey.generate("longhaul/test")
OLD_SIGNER = SignerKey.generate("longhaul/test")
KEYS = (SIGNER.verifier(),)


def _log(store: TaskApplication) -> MerkleLog:
    log = store.merkle_log
    assert log is not None
    return log


def _worked(store: TaskApplication, *, steps: int = 3) -> Task:
    """A task of ``2 + steps`` versions: submitted, leased, ``steps`` checkpoints (``"n": i``)."""
    task = new_task(START, text="audit me")
    store.save_tasks(task)
    epoch = task.grant_lease(worker="w-1", now=START, until=UNTIL)
    for n in range(steps):
        task.save_checkpoint(epoch=epoch, now=START, step=0, checkpoint={"n": f"step-{n}"}, lease_until=UNTIL)
    store.save_tasks(task)
    return task


def _sign(store: TaskApplication, signer: SignerKey = SIGNER) -> None:
    assert catch_up(_log(store), store.recorder.select_notifications, signer, START) is not None


def test_a_task_in_a_signed_checkpoint_is_verified(postgres_store: TaskApplication) -> None:
    task = _worked(postgres_store)
    before = verify_task(postgres_store, task.id, KEYS)
    assert before.chain.status == Status.VERIFIED
    assert before.checkpoint.status == Status.PENDING
    assert "LONGHAUL_CHECKPOINT_INTERVAL_SECONDS" in before.checkpoint.summary
    assert not before.failed

    _sign(postgres_store)
    after = verify_task(postgres_store, task.id, KEYS)
    assert (after.chain.status, after.checkpoint.status) == (Status.VERIFIED, Status.VERIFIED)
    assert after.chain.summary == "all 5 events match their chained hashes"
    assert (after.checkpoint.size, after.checkpoint.version) == (5, 5)
    assert after.checkpoint.signer == f"{SIGNER.name}+{SIGNER.verifier().key_id:08x}"
    assert after.checkpoint.signed_at == START
    assert after.checkpoint.faults == ()
    assert after.faulty_versions == frozenset()


def test_events_after_the_checkpoint_are_named_as_not_yet_in_one(postgres_store: TaskApplication) -> None:
    task = _worked(postgres_store)
    _sign(postgres_store)
    task.complete(epoch=1, now=START, message=None)
    postgres_store.save_tasks(task)

    status = verify_task(postgres_store, task.id, KEYS).checkpoint
    assert status.status == Status.VERIFIED
    assert status.version == 5
    assert status.summary.endswith("; versions 6 to 6 are not yet in a signed checkpoint")


@pytest.mark.parametrize("signed", [False, True])
def test_one_changed_byte_fails_the_chain_at_its_version(
    postgres_store: TaskApplication, signed: bool
) -> None:
    task = _worked(postgres_store)
    if signed:
        _sign(postgres_store)
    alter_event(postgres_store, task.id, 4, b"step-1")

    found = verify_task(postgres_store, task.id, KEYS)
    assert found.failed
    assert found.chain.status == Status.FAILED
    assert [(f.version, f.reason) for f in found.chain.faults] == [
        (4, "hash-mismatch: the event does not match its hash: it was altered")
    ]
    # The chain hashes are still the ones the checkpoint signed: the chain check is what fails.
    assert found.checkpoint.status == (Status.VERIFIED if signed else Status.PENDING)
    assert found.faulty_versions == {4}


@pytest.mark.parametrize("altered", [1, 3, 5])
def test_an_event_altered_with_its_chain_fails_the_checkpoint_naming_the_versions(
    postgres_store: TaskApplication, altered: int
) -> None:
    task = _worked(postgres_store)
    _sign(postgres_store)
    alter_event(postgres_store, task.id, altered, b"audit me" if altered == 1 else b"step-")
    rechain(postgres_store, task.id, altered)

    found = verify_task(postgres_store, task.id, KEYS)
    assert found.chain.status == Status.VERIFIED  # the chain alone looks fine
    assert found.checkpoint.status == Status.FAILED
    assert found.failed
    faults = found.checkpoint.faults
    assert [f.version for f in faults] == list(range(altered, 6))
    assert faults[-1].reason == "its stored chain hash is not the one the signed checkpoint covers"
    assert all(
        f.reason.startswith("its stored chain hash is not the one the Merkle log took in")
        for f in faults[:-1]
    )
    assert found.faulty_versions == set(range(altered, 6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(version=st.integers(1, 5), offset=st.integers(0, 10_000))
def test_any_flipped_bit_is_named_by_version_with_or_without_its_chain(
    postgres_store: TaskApplication, version: int, offset: int
) -> None:
    task = _worked(postgres_store)  # a new task per example, in the same log
    _sign(postgres_store)
    flip_byte(postgres_store, task.id, version, offset)

    chain_broken = verify_task(postgres_store, task.id, KEYS)
    assert [f.version for f in chain_broken.chain.faults] == [version]
    assert chain_broken.checkpoint.status == Status.VERIFIED

    rechain(postgres_store, task.id, version)
    covered_up = verify_task(postgres_store, task.id, KEYS)
    assert covered_up.chain.status == Status.VERIFIED
    assert [f.version for f in covered_up.checkpoint.faults] == list(range(version, 6))


def test_a_checkpoint_another_key_signed_fails(postgres_store: TaskApplication) -> None:
    task = _worked(postgres_store)
    _sign(postgres_store, OLD_SIGNER)

    status = verify_task(postgres_store, task.id, KEYS).checkpoint
    assert status.status == Status.FAILED
    ((version, reason),) = [(f.version, f.reason) for f in status.faults]
    assert version == 5
    assert reason.startswith("the receipt does not verify: the checkpoint is not signed by")
    # Both keys given (a rotation): the old key's checkpoint verifies, and names its key.
    rotated = verify_task(postgres_store, task.id, (*KEYS, OLD_SIGNER.verifier())).checkpoint
    assert rotated.status == Status.VERIFIED
    assert rotated.signer == f"{OLD_SIGNER.name}+{OLD_SIGNER.verifier().key_id:08x}"


def test_without_a_verifier_key_or_a_merkle_log_the_checkpoint_is_unavailable(
    postgres_store: TaskApplication,
) -> None:
    task = _worked(postgres_store)
    _sign(postgres_store)
    assert verify_task(postgres_store, task.id, ()).checkpoint.status == Status.UNAVAILABLE

    memory_store = TaskApplication(MemoryConfig())
    in_memory = _worked(memory_store)
    found = verify_task(memory_store, in_memory.id, KEYS)
    memory_store.close()
    assert found.chain.status == Status.VERIFIED
    assert found.checkpoint.status == Status.UNAVAILABLE
    assert "LONGHAUL_STORE=memory" in found.checkpoint.summary
