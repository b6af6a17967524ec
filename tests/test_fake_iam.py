"""The fake IAM over real HTTP: deterministic grants, idempotent revocations, the call log."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from longhaul.demo.fake_iam import grants_for, running


@pytest.fixture
def iam() -> Iterator[httpx.Client]:
    with running() as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client


def revoke(client: httpx.Client, key: str | None, *, grant: int = 1, task: str = "t1") -> httpx.Response:
    g = grants_for(3)[grant - 1]
    headers = {"X-Longhaul-Task": task}
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"system": 3, "grant_id": g["grant_id"], "user": g["user"]}
    return client.post("/revocations", json=body, headers=headers)


def test_grants_are_deterministic_per_system(iam: httpx.Client) -> None:
    first = iam.get("/systems/7/grants").json()
    assert first == iam.get("/systems/7/grants").json() == grants_for(7)
    assert len(first) == 5
    assert {g["grant_id"] for g in first} == {f"s7-g{i}" for i in range(1, 6)}
    assert all(g["system"] == 7 and g["user"].startswith("user") and g["role"] for g in first)
    assert first != iam.get("/systems/8/grants").json()


def test_a_repeated_key_returns_the_first_result_and_applies_nothing(iam: httpx.Client) -> None:
    first = revoke(iam, "t1:revoke:s3-g1")
    again = revoke(iam, "t1:revoke:s3-g1")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.json()["status"] == "revoked"
    assert len(iam.get("/revocations").json()) == 1
    applied = [c["applied"] for c in iam.get("/calls").json()]
    assert applied == [True, False]


def test_a_used_key_with_another_body_is_refused(iam: httpx.Client) -> None:
    revoke(iam, "k1", grant=1)
    other = revoke(iam, "k1", grant=2)

    assert other.status_code == 409
    assert len(iam.get("/revocations").json()) == 1


def test_a_missing_key_is_refused_and_applies_nothing(iam: httpx.Client) -> None:
    response = revoke(iam, None)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]
    assert iam.get("/revocations").json() == []
    assert iam.get("/calls").json()[0]["applied"] is False


def test_an_unknown_grant_is_refused(iam: httpx.Client) -> None:
    body = {"system": 3, "grant_id": "nope", "user": "x"}
    response = iam.post("/revocations", json=body, headers={"Idempotency-Key": "k"})

    assert response.status_code == 422
    assert iam.get("/revocations").json() == []


def test_calls_lists_every_request_oldest_first(iam: httpx.Client) -> None:
    before = time.time()
    iam.get("/systems/1/grants", headers={"X-Longhaul-Task": "task-a"})
    revoke(iam, "task-b:revoke:s3-g1", task="task-b")
    iam.get("/systems/2/grants")

    calls = iam.get("/calls").json()

    assert [(c["method"], c["path"]) for c in calls] == [
        ("GET", "/systems/1/grants"),
        ("POST", "/revocations"),
        ("GET", "/systems/2/grants"),
    ]
    assert [c["task_id"] for c in calls] == ["task-a", "task-b", None]
    assert [c["idempotency_key"] for c in calls] == [None, "task-b:revoke:s3-g1", None]
    assert [c["applied"] for c in calls] == [False, True, False]
    assert all(set(c) == {"method", "path", "task_id", "idempotency_key", "applied", "at"} for c in calls)
    stamps = [c["at"] for c in calls]
    assert stamps == sorted(stamps)
    assert before <= stamps[0] <= time.time()
    assert [c["path"] for c in iam.get("/calls", params={"task_id": "task-b"}).json()] == ["/revocations"]


def test_concurrent_requests_with_one_key_apply_it_once(iam: httpx.Client) -> None:
    url = str(iam.base_url)
    statuses: list[int] = []

    def hammer() -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            statuses.append(revoke(client, "same-key").status_code)

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200] * 15 + [201]
    assert len(iam.get("/revocations").json()) == 1
    assert sum(c["applied"] for c in iam.get("/calls").json()) == 1
