"""Receipts over HTTP, and the log's public side: its verifier keys and its latest checkpoint.

On PostgreSQL (the Merkle log lives there), with two tenants' API keys. A task's receipt is
scoped and authenticated like the other audit reads: another tenant's task is TaskNotFound
exactly like a missing one, no key is 401, and before a signed checkpoint covers the task it is
NOT_CHECKPOINTED naming the setting of the sequencer's interval. The receipt answered is the log's
own and verifies with ``store.evidence.receipts`` and the served key alone. ``/audit/v1/log-key`` and
``/audit/v1/checkpoints/latest`` need no key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import httpx
import pytest
import pytest_asyncio
from litestar import Litestar

from api.api_keys import KeyRing, parse_pairs
from api.app import create_app
from api.config import GatewayConfig
from api.rest import described
from domain.task import Task
from store.evidence.checkpoints import parse_checkpoint
from store.evidence.merkle_log import MerkleLog, catch_up
from store.evidence.receipts import Receipt, verify_receipt
from store.evidence.signed_notes import SignerKey, open_note
from store.log.application import TaskApplication
from store.log.config import MemoryConfig
from tests.api.support import A2A_HEADERS, PUBLIC_URL, FakeClock, http_client, log_position, make_registry
from tests.support.tasks import new_task

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
AUDIT = "/audit/v1"
START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
SIGNER = SignerKey.generate("longhaul/receipts.test")
OLD_SIGNER = SignerKey.generate("longhaul/receipts.test")
KEYS = (SIGNER.verifier(), OLD_SIGNER.verifier())

pytestmark = pytest.mark.postgres


def bearer(key: str) -> JSON:
    return {**A2A_HEADERS, "Authorization": f"Bearer {key}"}


@pytest_asyncio.fixture
async def http(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(
        api_keys=KeyRing(parse_pairs(f"acme={ACME_KEY},globex={GLOBEX_KEY}")), audit_verifier_keys=KEYS
    )
    async with http_client(app) as client:
        yield client


def _log(store: TaskApplication) -> MerkleLog:
    log = store.merkle_log
    assert log is not None
    return log


def _sign(store: TaskApplication) -> None:
    assert catch_up(_log(store), store.recorder.select_notifications, SIGNER, START) is not None


@pytest.fixture
def task(store: TaskApplication) -> Task:
    """acme's task, leased: two events."""
    task = new_task(START, tenant="acme")
    store.save_tasks(task)
    task.grant_lease(worker="w-1", now=START, until=START + timedelta(minutes=5))
    store.save_tasks(task)
    return task


def _status(response: httpx.Response, http_status: int, reason: str) -> JSON:
    assert response.status_code == http_status, response.text
    assert response.headers["content-type"] == "application/json"
    error: JSON = response.json()["error"]
    assert (error["code"], error["details"][0]["reason"]) == (http_status, reason)
    return error


async def test_the_receipt_is_the_logs_own_and_verifies_with_the_served_key(
    http: httpx.AsyncClient, store: TaskApplication, task: Task
) -> None:
    _sign(store)
    task.complete(epoch=1, now=START, message=None)
    store.save_tasks(task)  # version 3, in no checkpoint yet

    response = await http.get(f"{AUDIT}/tasks/{task.id}/receipt", headers=bearer(ACME_KEY))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    expected = _log(store).receipt(task.id)
    assert expected is not None
    assert response.text == expected.to_json()
    receipt = Receipt.from_json(response.text)
    assert (receipt.task_id, receipt.version) == (task.id, 2)  # the last event the checkpoint covers
    served = (await http.get(f"{AUDIT}/log-key")).text.splitlines()
    verdict = verify_receipt(response.text, served)
    assert verdict.valid, verdict.reason
    assert verdict.checkpoint is not None
    assert verdict.checkpoint.size == 2
    assert not verify_receipt(response.text, served[1:]).valid  # only the old key: not its signature


async def test_no_checkpoint_yet_is_a_clear_404(
    http: httpx.AsyncClient, store: TaskApplication, task: Task
) -> None:
    response = await http.get(f"{AUDIT}/tasks/{task.id}/receipt", headers=bearer(ACME_KEY))

    error = _status(response, 404, "NOT_CHECKPOINTED")
    assert error["message"] == (
        f"no signed checkpoint covers task {task.id} yet: the sequencer signs one every"
        " LONGHAUL_CHECKPOINT_INTERVAL_SECONDS"
    )
    assert error["status"] == "NOT_FOUND"


async def test_another_tenants_receipt_is_not_found_like_a_missing_task(
    http: httpx.AsyncClient, store: TaskApplication, task: Task
) -> None:
    _sign(store)
    before = log_position(store)
    missing = uuid4()

    foreign = await http.get(f"{AUDIT}/tasks/{task.id}/receipt", headers=bearer(GLOBEX_KEY))
    unknown = await http.get(f"{AUDIT}/tasks/{missing}/receipt", headers=bearer(GLOBEX_KEY))
    named = await http.get(
        f"{AUDIT}/tasks/{task.id}/receipt", params={"tenant": "acme"}, headers=bearer(GLOBEX_KEY)
    )
    anonymous = await http.get(f"{AUDIT}/tasks/{task.id}/receipt", headers=A2A_HEADERS)

    foreign_error = _status(foreign, 404, "TASK_NOT_FOUND")
    unknown_error = _status(unknown, 404, "TASK_NOT_FOUND")
    assert foreign_error == {
        **unknown_error,
        "message": unknown_error["message"].replace(str(missing), str(task.id)),
    }
    _status(named, 400, "INVALID_PARAMS")
    _status(anonymous, 401, "UNAUTHENTICATED")
    assert str(task.id) not in anonymous.text
    assert log_position(store) == before


async def test_the_log_key_and_the_latest_checkpoint_need_no_key(
    http: httpx.AsyncClient, store: TaskApplication, task: Task
) -> None:
    keys = await http.get(f"{AUDIT}/log-key")
    assert keys.status_code == 200, keys.text
    assert keys.headers["content-type"] == "text/plain; charset=utf-8"
    assert keys.text == f"{SIGNER.verifier()}\n{OLD_SIGNER.verifier()}\n"

    _status(await http.get(f"{AUDIT}/checkpoints/latest"), 404, "NO_CHECKPOINT")
    _sign(store)
    latest = await http.get(f"{AUDIT}/checkpoints/latest")
    assert latest.status_code == 200, latest.text
    assert latest.headers["content-type"] == "text/plain; charset=utf-8"
    stored = _log(store).latest_checkpoint()
    assert stored is not None
    assert latest.text == stored.note
    text, signers = open_note(latest.text, [SIGNER.verifier()])
    assert signers == [SIGNER.verifier()]
    checkpoint = parse_checkpoint(text)
    assert (checkpoint.origin, checkpoint.size, checkpoint.root_hash) == (SIGNER.name, 2, stored.root_hash)


async def test_a_gateway_without_a_verifier_key_says_so(make_app: Callable[..., Litestar]) -> None:
    async with http_client(make_app()) as client:
        error = _status(await client.get(f"{AUDIT}/log-key"), 404, "NO_VERIFIER_KEY")
    assert "LONGHAUL_AUDIT_KEY_FILE" in error["message"]


async def test_a_memory_store_has_no_receipts() -> None:
    store = TaskApplication(MemoryConfig())
    app = _memory_app(store)
    task = new_task(START, tenant="acme")
    store.save_tasks(task)
    async with http_client(app) as client:
        receipt = await client.get(f"{AUDIT}/tasks/{task.id}/receipt", params={"tenant": "acme"})
        latest = await client.get(f"{AUDIT}/checkpoints/latest")
    store.close()
    assert "keeps no Merkle log" in _status(receipt, 404, "NOT_CHECKPOINTED")["message"]
    assert "keeps no Merkle log" in _status(latest, 404, "NO_CHECKPOINT")["message"]


def _memory_app(store: TaskApplication) -> Litestar:
    return create_app(
        GatewayConfig(
            store=store,
            registry=make_registry(),
            clock=FakeClock(),
            default_skill="echo",
            max_pause=timedelta(days=7),
            retention=timedelta(days=30),
            public_url=PUBLIC_URL,
            audit_verifier_keys=KEYS,
        )
    )


def test_the_openapi_document_describes_the_answers() -> None:
    store = TaskApplication(MemoryConfig())
    document = described(_memory_app(store).openapi_schema.to_schema())
    store.close()
    paths = document["paths"]
    receipt = paths["/audit/v1/tasks/{task_id}/receipt"]["get"]["responses"]["200"]["content"]
    assert receipt["application/json"]["schema"]["properties"]["format"] == {"const": "longhaul-receipt/v1"}
    for path in ("/audit/v1/log-key", "/audit/v1/checkpoints/latest"):
        assert set(paths[path]["get"]["responses"]["200"]["content"]) == {"text/plain"}, path
        assert "security" not in paths[path]["get"], path
