"""The timeline page in a real browser (chromium), against real longhaul processes on PostgreSQL.

An access review runs on two workers behind a gateway with API keys for two tenants: its worker
is SIGKILLed mid-fetch, the other one resumes it, it pauses for the owners' approval, is answered
(with a ``<script>`` in the text) and completes with side effects and a report. The auditor signs
in with the tenant's API key as the HTTP Basic password, finds the task with the search form,
sees every event of the log, clicks a version to see the state then, and sees the effects and
the artifact. Another tenant's key, and no key, see nothing of it.

The page also shows the verification of the task's hash chain and of the signed checkpoint
covering it: pending until a checkpoint is signed (``store.evidence.merkle_log.catch_up`` stands in for
the sequencer), then verified. After the test changes one byte of an event in the events table,
the chain fails naming that version; after it also rewrites the chain rows to match (the chain
alone checks), the checkpoint fails, naming the versions from the altered one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from playwright.sync_api import Browser, Dialog, Page
from playwright.sync_api import Error as PlaywrightError

from api.api_keys import key_id_of
from domain.task import Task
from store.evidence.key_files import create_signer_key
from store.evidence.merkle_log import catch_up
from store.evidence.receipts import verify_receipt
from store.evidence.signed_notes import SignerKey
from store.log.application import TaskApplication
from store.public_form.task_wire import task_to_wire
from tests.crash.cluster import Cluster, events, holder_pid, kind, of_kind, wait_for_state, worker_id
from tests.support.processes import wait_until
from tests.support.tampering import alter_event, rechain

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


def _a_review_with_a_crash_and_a_pause(cluster: Cluster, store: TaskApplication, audit_key: Path) -> Review:
    cluster.overrides["api_keys"] = KEYS
    cluster.overrides["audit_key_file"] = str(audit_key)  # the gateway verifies checkpoints with it
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
    cluster: Cluster, store: TaskApplication, browser: Browser, tmp_path: Path
) -> None:
    signer = create_signer_key(tmp_path / "audit-key", "longhaul/browser.test")
    review = _a_review_with_a_crash_and_a_pause(cluster, store, tmp_path / "audit-key")
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

    _the_verification_follows_the_log(page, store, review, signer)
    _others_see_nothing_of(browser, base, task_id, dialogs)
    assert dialogs == []


def _statuses(page: Page) -> tuple[str | None, str | None]:
    return (
        page.get_attribute("#chain-verification", "data-status"),
        page.get_attribute("#checkpoint-verification", "data-status"),
    )


def _faults(page: Page, check: str) -> list[int]:
    items = page.locator(f"#{check}-verification li.fault")
    return [int(items.nth(i).get_attribute("data-version") or 0) for i in range(items.count())]


def _the_verification_follows_the_log(
    page: Page, store: TaskApplication, review: Review, signer: SignerKey
) -> None:
    """Pending, verified once signed, then failed after each alteration of the log, naming the version."""
    page.goto(f"{review.base}/audit/tasks/{review.task_id}")
    assert _statuses(page) == ("verified", "pending")
    assert "not yet in a signed checkpoint" in page.inner_text("#checkpoint-verification")
    assert page.locator("#verification [role=alert]").count() == 0

    log = store.merkle_log
    assert log is not None
    signed = catch_up(log, store.recorder.select_notifications, signer, datetime.now(UTC))
    assert signed is not None
    last = review.logged[-1].originator_version
    # The gateway serves the key it was configured with, and the receipt that verifies with it.
    served = httpx.get(f"{review.base}/audit/v1/log-key", timeout=30)
    assert served.text == f"{signer.verifier()}\n"
    receipt = httpx.get(
        f"{review.base}/audit/v1/tasks/{review.task_id}/receipt",
        headers={"Authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    )
    assert receipt.status_code == 200, receipt.text
    assert verify_receipt(receipt.text, served.text.splitlines()).valid
    page.reload()
    assert _statuses(page) == ("verified", "verified")
    assert page.get_attribute("#verification", "data-failed") == "false"
    shown = page.inner_text("#checkpoint-verification")
    assert (
        f"versions 1 to {last} are in the checkpoint of size {signed.size} signed by {signer.name}+" in shown
    )
    assert "FAILED" not in page.inner_text("#verification")

    # One byte of the answer's event changed in the events table: the chain fails at that version.
    answered = next(e for e in review.logged if kind(e) == "InputReceived").originator_version
    alter_event(store, review.task_id, answered, b"approved")
    page.reload()
    assert _statuses(page) == ("failed", "verified")
    assert page.get_attribute("#chain-verification", "role") == "alert"
    assert page.get_attribute("#verification", "data-failed") == "true"
    assert "FAILED" in page.inner_text("#verification h2")
    assert _faults(page, "chain") == [answered]
    assert f"version {answered}: hash-mismatch" in page.inner_text("#chain-verification li.fault")
    assert page.get_attribute(f"#v{answered}", "class") == "faulty"
    assert "Xpproved" in page.inner_text(f"#v{answered} td.summary")  # the page shows what is stored

    # The chain rewritten to match: the chain alone checks, the signed checkpoint does not.
    rechain(store, review.task_id, answered)
    page.reload()
    assert _statuses(page) == ("verified", "failed")
    assert page.get_attribute("#checkpoint-verification", "role") == "alert"
    assert "FAILED" in page.inner_text("#verification h2")
    assert _faults(page, "checkpoint") == list(range(answered, last + 1))
    first = page.locator("#checkpoint-verification li.fault").first.inner_text()
    assert first.startswith(
        f"version {answered}: its stored chain hash is not the one the Merkle log took in"
    )
    assert page.locator("#timeline tr.faulty").count() == last - answered + 1


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
