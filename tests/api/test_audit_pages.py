"""The audit pages over HTTP (no browser): what they show, what they escape, whom they refuse.

The app runs on the in-memory store; the stand-in worker (``Advance``) moves the task through a
pause, a side effect and an artifact. The browser tests (``tests/browser``) drive the same pages
in chromium against real processes.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote
from uuid import UUID, uuid4

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar

from api.api_keys import KeyRing, parse_pairs
from domain.files import FileRef, file_part
from store.deliveries.records import Attempt, DeliveryRecorder, NewDelivery
from store.log.application import TaskApplication
from store.log.config import StoreConfig
from store.public_form.task_wire import task_to_wire
from tests.api.support import A2A_HEADERS, Advance, http_client, user_message
from tests.support.tampering import set_first_byte

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
KEYS = f"acme={ACME_KEY},globex={GLOBEX_KEY}"
HOSTILE = "<script>window.pwned = 1</script><img src=x onerror=alert(1)>"
IMMEDIATE = {"returnImmediately": True}


def basic(key: str, user: str = "auditor") -> JSON:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()}


async def _send(http: httpx.AsyncClient, message: JSON, headers: JSON | None = None) -> JSON:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": IMMEDIATE},
    }
    response = await http.post("/a2a/jsonrpc", json=body, headers={**A2A_HEADERS, **(headers or {})})
    assert response.status_code == 200, response.text
    task: JSON = response.json()["result"]["task"]
    return task


async def _a_full_task(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance, **auth: str
) -> UUID:
    """Submitted (hostile text), paused, answered (hostile text), an effect, an artifact, completed."""
    headers = {"Authorization": f"Bearer {auth['key']}"} if auth else {}
    sent = await _send(http, user_message(f"first {HOSTILE}"), headers)
    task_id = UUID(sent["id"])
    await advance.wait_exists(task_id)
    advance.ask(task_id, question=f"approve {HOSTILE}?")
    await _send(
        http, user_message(f"yes {HOSTILE}", taskId=str(task_id), contextId=sent["contextId"]), headers
    )
    task, epoch = advance._leased(task_id)
    task.record_effect(epoch=epoch, now=advance.clock(), key="revoke:alice", result={"revoked": HOSTILE})
    store.save_tasks(task)
    advance.complete(task_id, text=f"report {HOSTILE}")
    return task_id


@pytest.fixture
def open_app(make_app: Callable[..., Litestar]) -> Litestar:
    return make_app()


@pytest_asyncio.fixture
async def http(open_app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(open_app) as client:
        yield client


@pytest_asyncio.fixture
async def keyed(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(make_app(api_keys=KeyRing(parse_pairs(KEYS)))) as client:
        yield client


def _state(page: str) -> JSON:
    """The state the page shows (the JSON of its ``state-json`` block)."""
    shown: JSON = json.loads(
        html.unescape(page.split('<pre id="state-json">')[1].split("</pre>", maxsplit=1)[0])
    )
    return shown


def _rows(page: str) -> list[tuple[int, str]]:
    """``(version, type)`` of every timeline row."""
    return [(int(v), t) for v, t in re.findall(r'<tr id="v(\d+)" data-version="\d+" data-type="(\w+)"', page)]


class TestTheTaskPage:
    async def test_it_shows_every_event_in_order_with_actor_and_summary(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        response = await http.get(f"/audit/tasks/{task_id}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/html")
        logged = [(e.originator_version, type(e).__name__) for e in store.history(task_id)]
        assert _rows(response.text) == logged
        assert [t for _, t in logged] == [
            "Submitted", "LeaseGranted", "InputRequested", "InputReceived", "LeaseGranted",
            "EffectRecorded", "ArtifactChunkAppended", "Completed",
        ]  # fmt: skip
        assert "worker test-worker (epoch 2)" in response.text
        assert "client default" in response.text
        assert "effect revoke:alice recorded" in response.text

    @pytest.mark.postgres
    async def test_each_stored_file_of_an_event_and_an_artifact_links_to_the_file(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        sent = await _send(http, user_message("write the report"))
        task_id = UUID(sent["id"])
        await advance.wait_exists(task_id)
        task, epoch = advance._leased(task_id)
        report = FileRef("ab" * 32, 3 * 1024 * 1024 + 5)
        data = FileRef("cd" * 32, 12)
        parts = [
            file_part(report, media_type="application/pdf", filename=f"report {HOSTILE}.pdf"),
            file_part(data, media_type="text/csv"),
        ]
        task.append_artifact(epoch=epoch, now=advance.clock(), artifact={"artifactId": "out", "parts": parts})
        store.save_tasks(task)

        page = (await http.get(f"/audit/tasks/{task_id}")).text

        links = re.findall(r'<a class="file" href="([^"]+)" data-sha256="[0-9a-f]+">([^<]*)</a>', page)
        event_links = [(f"/a2a/files/{task_id}/{report.sha256}", html.escape(f"report {HOSTILE}.pdf")),
                       (f"/a2a/files/{task_id}/{data.sha256}", data.sha256)]  # fmt: skip
        assert links == event_links * 2  # the event's row, then the artifact
        assert "3.0 MiB, application/pdf" in page
        assert "12 bytes, text/csv" in page
        assert HOSTILE not in page

    async def test_each_failed_attempt_is_a_row_with_its_worker_epoch_and_cause(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        sent = await _send(http, user_message("go"))
        task_id = UUID(sent["id"])
        await advance.wait_exists(task_id)
        task, epoch = advance._leased(task_id)
        task.fail_attempt(epoch=epoch, now=advance.clock(), step=0, cause="timeout", detail=f"late {HOSTILE}")
        store.save_tasks(task)

        page = (await http.get(f"/audit/tasks/{task_id}")).text

        assert (task.version, "StepAttemptFailed") in _rows(page)
        assert f"attempt 1 at step 0 by test-worker (epoch {epoch}) failed: timeout: late" in page
        assert HOSTILE not in page, "the detail is escaped like every value from the log"

    async def test_the_verification_of_a_memory_store_is_its_chain_alone(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        page = (await http.get(f"/audit/tasks/{task_id}")).text
        assert re.findall(
            r'<div id="(\w+)-verification" class="verification (\w+)" data-status="\w+"', page
        ) == [
            ("chain", "verified"),
            ("checkpoint", "unavailable"),
        ]
        assert "all 8 events match their chained hashes" in page
        assert "this store keeps no Merkle log (LONGHAUL_STORE=memory)" in page
        assert 'data-failed="false"' in page
        assert 'role="alert"' not in page

    async def test_every_value_from_the_log_is_escaped_and_no_script_may_run(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        response = await http.get(f"/audit/tasks/{task_id}")
        page = response.text
        assert "<script" not in page.lower()
        assert "<img" not in page.lower()
        assert page.count(html.escape("<script>window.pwned = 1</script>", quote=False)) >= 5
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src" not in policy  # default-src 'none' forbids every script

    async def test_the_state_at_a_chosen_version_is_the_task_as_it_was_then(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        for version, state in [
            (1, "TASK_STATE_SUBMITTED"),
            (3, "TASK_STATE_INPUT_REQUIRED"),
            (8, "TASK_STATE_COMPLETED"),
        ]:
            response = await http.get(f"/audit/tasks/{task_id}", params={"version": version})
            shown = _state(response.text)
            assert shown["status"]["state"] == state
            assert shown == task_to_wire(store.task_at(task_id, version))  # the log replayed to there
            assert re.search(rf'<tr id="v{version}"[^>]* class="chosen"', response.text)
        assert "artifacts" not in _state((await http.get(f"/audit/tasks/{task_id}?version=6")).text)
        assert "artifacts" in _state((await http.get(f"/audit/tasks/{task_id}?version=7")).text)
        assert (
            _state((await http.get(f"/audit/tasks/{task_id}")).text)["status"]["state"]
            == "TASK_STATE_COMPLETED"
        )

    async def test_effects_and_artifacts_are_listed(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        page = (await http.get(f"/audit/tasks/{task_id}")).text
        effects = page.split('id="effects-table"')[1].split("</table>")[0]
        assert "revoke:alice" in effects
        assert html.escape("<script>window.pwned = 1</script>", quote=False) in effects
        artifacts = page.split('<h2 id="artifacts">')[1].split("<h2")[0]
        assert 'data-artifact-id="out"' in artifacts
        assert html.escape(f"report {HOSTILE}", quote=False) in artifacts
        assert "LONGHAUL_STORE=memory" in page  # no delivery record in memory: said so

    async def test_unknown_ids_and_versions_are_a_clear_404(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(http, store, advance)
        missing = await http.get(f"/audit/tasks/{uuid4()}")
        assert missing.status_code == 404
        assert "not found" in missing.text
        assert "<form" in missing.text
        junk = await http.get("/audit/tasks/not-a-task")
        assert junk.status_code == 404
        assert "is not a task id" in html.unescape(junk.text)
        no_page = await http.get(f"/audit/tasks/{task_id}/more")
        assert no_page.status_code == 404
        assert "is no audit page" in no_page.text
        posted = await http.post("/audit/")
        assert posted.status_code == 405
        assert "GET" in posted.headers["allow"]
        assert posted.headers["content-type"].startswith("text/html")
        beyond = await http.get(f"/audit/tasks/{task_id}", params={"version": 9})
        assert beyond.status_code == 404
        assert "has versions 1 to 8; there is no version 9" in beyond.text

    async def test_an_expired_task_says_it_expired(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        sent = await _send(http, user_message("soon gone"))
        task_id = UUID(sent["id"])
        await advance.wait_exists(task_id)
        advance.expire(task_id)
        response = await http.get(f"/audit/tasks/{task_id}")
        assert response.status_code == 404
        assert "it expired" in response.text


class TestTheSearch:
    async def test_the_form_leads_to_the_tasks_page(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        form = await http.get("/audit/")
        assert form.status_code == 200
        assert '<form method="get" action="/audit/"' in form.text
        task_id = await _a_full_task(http, store, advance)
        found = await http.get("/audit/", params={"task": f" {task_id} "})
        assert found.status_code == 303
        assert found.headers["location"] == f"/audit/tasks/{task_id}"

    async def test_in_open_mode_a_tenant_can_be_named(
        self, http: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        body = {
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"tenant": "other", "message": user_message("theirs"), "configuration": IMMEDIATE},
        }  # fmt: skip
        sent = (await http.post("/a2a/jsonrpc", json=body, headers=A2A_HEADERS)).json()["result"]["task"]
        assert (await http.get(f"/audit/tasks/{sent['id']}")).status_code == 404  # not the default tenant's
        found = await http.get("/audit/", params={"task": sent["id"], "tenant": "other"})
        assert found.headers["location"] == f"/audit/tasks/{sent['id']}?tenant=other"
        page = await http.get(found.headers["location"])
        assert page.status_code == 200
        assert "?version=1&amp;tenant=other#state" in page.text


class TestSigningIn:
    async def test_without_a_key_the_browser_is_asked_for_basic_credentials(
        self, keyed: httpx.AsyncClient
    ) -> None:
        for path in ("/audit/", f"/audit/tasks/{uuid4()}"):
            response = await keyed.get(path)
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith('Basic realm="longhaul audit"')
            assert response.headers["content-type"].startswith("text/html")
            assert "API key as the password" in response.text
        wrong = await keyed.get("/audit/", headers=basic("not-a-key-0123456789"))
        assert wrong.status_code == 401

    async def test_the_key_as_basic_password_or_bearer_shows_only_its_tenants_tasks(
        self, keyed: httpx.AsyncClient, store: TaskApplication, advance: Advance
    ) -> None:
        task_id = await _a_full_task(keyed, store, advance, key=ACME_KEY)
        page = f"/audit/tasks/{task_id}"
        assert (await keyed.get(page, headers=basic(ACME_KEY))).status_code == 200
        assert (await keyed.get(page, headers={"Authorization": f"Bearer {ACME_KEY}"})).status_code == 200
        theirs = await keyed.get(page, headers=basic(GLOBEX_KEY))
        missing = await keyed.get(f"/audit/tasks/{uuid4()}", headers=basic(GLOBEX_KEY))
        assert theirs.status_code == missing.status_code == 404
        assert (
            "tenant"
            not in re.sub(r"[0-9a-f-]{36}", "", theirs.text).split('id="reason">')[1].split("</p>")[0]
        )
        named = await keyed.get(page, params={"tenant": "acme"}, headers=basic(GLOBEX_KEY))
        assert named.status_code == 400
        assert "must be empty or the tenant of the API key" in named.text
        assert "acme" not in (await keyed.get("/audit/", headers=basic(GLOBEX_KEY))).text

    async def test_the_a2a_methods_still_take_only_a_bearer_key(self, keyed: httpx.AsyncClient) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        response = await keyed.post("/a2a/jsonrpc", json=body, headers={**A2A_HEADERS, **basic(ACME_KEY)})
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.postgres
async def test_the_webhook_deliveries_are_shown_with_every_attempt(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _a_full_task(http, store, advance)
    config = store.config
    assert isinstance(config, StoreConfig)
    recorder = DeliveryRecorder(config.database_url, config.schema, pool_size=1)
    await recorder.open()
    start = datetime.now(UTC)
    try:
        new = NewDelivery(
            f"msg_{task_id.hex}", task_id, "default", 8, "Completed", start, "hook-1",
            f"https://example.com/hook?x={HOSTILE}", "{}",
        )  # fmt: skip
        recorded = await recorder.record([new], start, claimant="d-1", lease=timedelta(seconds=30))
        (delivery,) = recorded.claimed
        failed = Attempt(1, start, 12.5, 503, None, "retry", "d-1")
        await recorder.finish(delivery, failed, state="pending", next_attempt_at=start)
        (again,) = await recorder.claim("d-1", start + timedelta(seconds=1), timedelta(seconds=30), 10)
        delivered = Attempt(2, start + timedelta(seconds=1), 8.0, 200, None, "delivered", "d-1")
        assert await recorder.finish(again, delivered, state="delivered")
    finally:
        await recorder.close()

    page = (await http.get(f"/audit/tasks/{task_id}")).text
    rows = page.split('id="deliveries-table"')[1].split("</table>", 1)[0]
    assert rows.count('<tr class="delivery">') == 1
    assert "Completed" in rows
    assert "hook-1" in rows
    assert "delivered at" in rows
    assert re.search(r"503, 12\.5 ms, retry</li>\s*<li>[^<]*: 200, 8\.0 ms, delivered</li>", rows)
    assert html.escape("<script>window.pwned = 1</script>", quote=False) in rows


@pytest.mark.postgres  # the events altered with SQL
async def test_a_log_that_no_longer_decodes_shows_its_failed_verification(
    http: httpx.AsyncClient, store: TaskApplication, advance: Advance
) -> None:
    task_id = await _a_full_task(http, store, advance)
    missing_id = uuid4()
    missing = (await http.get(f"/audit/tasks/{missing_id}", params={"tenant": "globex"})).text
    set_first_byte(store, task_id, 4, b"X")  # the answer's event: no longer JSON

    response = await http.get(f"/audit/tasks/{task_id}")

    assert response.status_code == 500
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    page = response.text
    assert "its log cannot be read" in page
    assert re.findall(r'<li class="fault" data-version="(\d+)">', page) == ["4"]
    assert 'id="chain-verification" class="verification failed" data-status="failed" role="alert"' in page
    assert "hash-mismatch: the event does not match its hash" in page
    assert "approve" not in page  # nothing of the task is shown but its id
    foreign = await http.get(f"/audit/tasks/{task_id}", params={"tenant": "globex"})
    assert foreign.status_code == 404
    assert foreign.text == missing.replace(str(missing_id), str(task_id))  # told apart from a missing one: no


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    task=st.text(max_size=40) | st.uuids().map(str),
    version=st.none() | st.text(max_size=8) | st.integers(-3, 12).map(str),
    tenant=st.none() | st.text(max_size=8),
    search=st.booleans(),
)
async def test_junk_gets_an_html_answer_never_a_server_error(
    keyed: httpx.AsyncClient, task: str, version: str | None, tenant: str | None, search: bool
) -> None:
    params = {k: v for k, v in {"version": version, "tenant": tenant}.items() if v is not None}
    if search:
        response = await keyed.get("/audit/", params={**params, "task": task}, headers=basic(ACME_KEY))
    else:
        response = await keyed.get(
            f"/audit/tasks/{quote(task, safe='')}", params=params, headers=basic(ACME_KEY)
        )
    assert response.status_code in (200, 303, 400, 404, 405), response.text
    if response.status_code != 303:
        assert response.headers["content-type"].startswith("text/html"), response.text
        assert "<script" not in response.text.lower()
