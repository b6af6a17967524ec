"""The timeline page in a real browser (chromium), against real longhaul processes on PostgreSQL.

An access review runs on two workers behind a gateway with API keys for two tenants: its worker
is SIGKILLed mid-fetch, the other one resumes it, it pauses for the owners' approval, is answered
(with a ``<script>`` in the text) and completes with side effects and a report. The auditor signs
in with the tenant's API key as the HTTP Basic password, finds the task with the search form,
sees every event of the log, clicks a version to see the state then, and sees the effects and
the artifact. Another tenant's key, and no key, see nothing of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from playwright.sync_api import Browser, Dialog, Page
from playwright.sync_api import Error as PlaywrightError

from api.api_keys import key_id_of
from domain.task import Task
from projections.task_wire import task_to_wire
from store.application import TaskApplication
from tests.crash.cluster import Cluster, events, holder_pid, kind, of_kind, wait_for_state, worker_id
from tests.support.processes import wait_until

JSON = dict[str, Any]

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
KEYS = f"acme={ACME_KEY},globex={GLOBEX_KEY}"
HOSTILE = "<script>window.pwned = true</script>"
SYSTEMS = 6
KILL_AFTER = 2
"""Systems fetched when the first worker is killed."""


def _send(base: str, key: str, message: JSON) -> JSON:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
    }
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {key}"}
    response = httpx.post(f"{base}/a2a/jsonrpc", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    answer: JSON = response.json()
    assert "result" in answer, answer
    task: JSON = answer["result"]["task"]
    return task


def _message(text: str, *, data: JSON | None = None, **extra: str) -> JSON:
    parts: list[JSON] = [{"text": text}]
    if data is not None:
        parts.append({"data": data})
    return {"messageId": uuid4().hex, "role": "ROLE_USER", "parts": parts, **extra}


def _signed_in(browser: Browser, key: str | None, tenant: str, dialogs: list[str]) -> Page:
    """A page of a new browser context that answers a Basic challenge with ``key`` (None: no key).

    Every dialog a script would open (``alert``) is noted in ``dialogs`` and dismissed.
    """
    context = browser.new_context(
        http_credentials={"username": tenant, "password": key} if key is not None else None
    )
    page = context.new_page()

    def note(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", note)
    return page


def _timeline(page: Page) -> list[tuple[int, str]]:
    rows = page.locator("#timeline tbody tr")
    return [
        (int(rows.nth(i).get_attribute("data-version") or 0), rows.nth(i).get_attribute("data-type") or "")
        for i in range(rows.count())
    ]


@dataclass(frozen=True)
class Review:
    """The access review of the test, once it completed, and what its log holds."""

    base: str
    task_id: UUID
    logged: list[Any]
    workers: tuple[str, str]
    """The killed worker's id, then the survivor's."""
    done: Task


def _a_review_with_a_crash_and_a_pause(cluster: Cluster, store: TaskApplication) -> Review:
    cluster.overrides["api_keys"] = KEYS
    cluster.fake_iam()
    workers = cluster.workers(2)
    base = cluster.gateway()
    params = {"systems": SYSTEMS, "fetch_delay_ms": 300, "revocations": 2}
    first = {**_message(f"review {HOSTILE}", data=params), "metadata": {"skill": "access-review"}}
    task_id = UUID(_send(base, ACME_KEY, first)["id"])

    # The worker holding the task is SIGKILLed mid-fetch; the other resumes after its lease.
    wait_until(lambda: len(store.get(task_id).checkpoint.get("fetched", [])) >= KILL_AFTER, 60, "two systems")
    victim = next(w for w in workers if w.pid == holder_pid(store, task_id))
    survivor = next(w for w in workers if w is not victim)
    victim.kill()
    paused = wait_for_state(store, task_id, "TASK_STATE_INPUT_REQUIRED", 60, cluster)
    answer = _message(
        f"approved {HOSTILE}", data={"approve": True}, taskId=str(task_id), contextId=paused.context_id
    )
    _send(base, ACME_KEY, answer)
    done = wait_for_state(store, task_id, "TASK_STATE_COMPLETED", 60, cluster)
    logged = events(store, task_id)
    grants = of_kind(logged, "LeaseGranted")
    assert len(grants) == 3, [kind(e) for e in logged]  # first worker, survivor, after the answer
    assert grants[0].worker == worker_id(victim)
    assert grants[1].worker == worker_id(survivor)
    assert len(done.effects) == 2
    return Review(base, task_id, logged, (grants[0].worker, grants[1].worker), done)


def test_the_page_of_a_paused_and_crashed_task_shows_its_whole_history(
    cluster: Cluster, store: TaskApplication, browser: Browser
) -> None:
    review = _a_review_with_a_crash_and_a_pause(cluster, store)
    base, task_id, logged = review.base, review.task_id, review.logged
    dialogs: list[str] = []

    # The auditor finds the task with the search form.
    page = _signed_in(browser, ACME_KEY, "acme", dialogs)
    page.goto(f"{base}/audit/")
    page.fill("#task", str(task_id))
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/audit/tasks/{task_id}")
    assert page.inner_text("#task-id") == str(task_id)
    assert page.inner_text("#state-now") == "TASK_STATE_COMPLETED"

    # Every event of the log, in order, with the actors the log names.
    assert _timeline(page) == [(e.originator_version, kind(e)) for e in logged]
    actors = page.locator("#timeline td.actor").all_inner_texts()
    assert f"worker {review.workers[0]} (epoch 1)" in actors
    assert f"worker {review.workers[1]} (epoch 2)" in actors
    assert actors[0] == f"client acme (key {key_id_of(hashlib.sha256(ACME_KEY.encode()).digest())})"
    assert "InputRequested" in page.locator("#timeline td.type").all_inner_texts()

    # What the client wrote is shown as text, and no script of it ran.
    summaries = page.locator("#timeline td.summary").all_inner_texts()
    assert HOSTILE in summaries[0]
    assert any(f"approved {HOSTILE}" in s for s in summaries)
    assert page.evaluate("typeof window.pwned") == "undefined"

    # A click on the version of the pause shows the task as it was then.
    asked = next(e for e in logged if kind(e) == "InputRequested")
    page.click(f"#v{asked.originator_version} a.version")
    page.wait_for_url(re.compile(rf"\?version={asked.originator_version}#state$"))
    assert page.inner_text("#chosen-version") == str(asked.originator_version)
    assert page.get_attribute(f"#v{asked.originator_version}", "class") == "chosen"
    shown = json.loads(page.inner_text("#state-json"))
    assert shown == task_to_wire(store.task_at(task_id, asked.originator_version))
    assert shown["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "artifacts" not in shown

    # The side effects with their results, and the report.
    keys = page.locator("#effects-table td.key").all_inner_texts()
    assert keys == [e.key for e in of_kind(logged, "EffectRecorded")]
    assert sorted(keys) == sorted(review.done.effects)
    report = page.locator("article.artifact")
    assert report.count() == len(review.done.artifacts) == 1
    assert "Access review" in report.inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"

    _others_see_nothing_of(browser, base, task_id, dialogs)
    assert dialogs == []


def _others_see_nothing_of(browser: Browser, base: str, task_id: UUID, dialogs: list[str]) -> None:
    """Another tenant's key finds nothing (page and search); without a key the browser is challenged."""
    theirs = _signed_in(browser, GLOBEX_KEY, "globex", dialogs)
    answer = theirs.goto(f"{base}/audit/tasks/{task_id}")
    assert answer is not None
    assert answer.status == 404
    assert "not found" in theirs.inner_text("#reason")
    assert theirs.locator("#timeline").count() == 0
    theirs.goto(f"{base}/audit/")
    theirs.fill("#task", str(task_id))
    theirs.click("button[type=submit]")
    theirs.wait_for_url(f"{base}/audit/tasks/{task_id}")
    assert theirs.locator("h1").inner_text() == "No such task"
    assert "review" not in theirs.content()

    # Without credentials a headless browser cannot answer the Basic challenge: the navigation
    # fails as unauthenticated, and what the gateway answered is the challenge and a sign-in page.
    stranger = _signed_in(browser, None, "", dialogs)
    with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
        stranger.goto(f"{base}/audit/tasks/{task_id}")
    refused = stranger.request.get(f"{base}/audit/tasks/{task_id}")
    assert refused.status == 401
    assert refused.headers["www-authenticate"].startswith("Basic ")
    assert "Sign in" in refused.text()
    assert str(task_id) not in refused.text()
