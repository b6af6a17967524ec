"""`longhaul up` with and without API keys: the open dev tenant is announced, keys are enforced,
and a key file that cannot be used stops the start with its line number."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_up import AGENT_CARD_WITHIN_S, _interrupt, _start_up
from tests.support.processes import free_port, wait_for_http


def _send(base: str, headers: dict[str, str]) -> httpx.Response:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return httpx.post(f"{base}/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0", **headers}, timeout=30)


def _mint(tenant: str) -> tuple[str, str]:
    """``longhaul keys new TENANT`` run as a user would: the key and the key file line."""
    done = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "keys", "new", tenant],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    said = {line.split(" (", 1)[0]: line.split(": ", 1)[1] for line in done.stdout.splitlines()}
    assert set(said) == {"key", "key id", "key file line"}, done.stdout
    return said["key"], said["key file line"]


def test_without_keys_up_warns_that_it_is_open(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    up = _start_up(tmp_path, port, store="memory")
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        assert "result" in _send(base, {}).json()
    finally:
        assert _interrupt(up) == 0, (tmp_path / "up.log").read_text()
    warnings = [line for line in (tmp_path / "up.log").read_text().splitlines() if "NO API KEYS" in line]
    assert len(warnings) == 1
    assert "WARNING" in warnings[0]
    assert "OPEN" in warnings[0]


def test_with_a_key_file_up_serves_only_its_keys(tmp_path: Path) -> None:
    key, line = _mint("acme")
    key_file = tmp_path / "keys"
    key_file.write_text(f"# acme's production key\n{line}\n")
    assert key not in key_file.read_text()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    up = _start_up(tmp_path, port, store="memory", api_key_file=str(key_file), log_format="json")
    try:
        wait_for_http(f"{base}/.well-known/agent-card.json", AGENT_CARD_WITHIN_S)
        card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
        refused = _send(base, {})
        served = _send(base, {"Authorization": f"Bearer {key}"})
    finally:
        assert _interrupt(up) == 0, (tmp_path / "up.log").read_text()
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert served.status_code == 200
    assert served.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    log = (tmp_path / "up.log").read_text()
    lines = [json.loads(text) for text in log.splitlines() if text.startswith("{")]
    assert not [entry for entry in lines if "NO API KEYS" in entry.get("message", "")]
    assert any("API keys: 1, for the tenants acme" in entry.get("message", "") for entry in lines)
    assert key not in log


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("k1 acme sha256:abc\n", "line 1: the digest must be sha256:"),
        ("# comment\n\nk1 acme\n", "line 3: expected 3 fields"),
        ("# only a comment\n", "holds no keys"),
    ],
)
def test_a_bad_key_file_stops_the_start_with_its_line(tmp_path: Path, content: str, says: str) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(content)

    up = _start_up(tmp_path, free_port(), store="memory", api_key_file=str(key_file))

    assert up.wait(60) == 1
    log = (tmp_path / "up.log").read_text()
    assert f"longhaul: LONGHAUL_API_KEY_FILE {key_file}" in log
    assert says in log
    assert "Traceback" not in log
