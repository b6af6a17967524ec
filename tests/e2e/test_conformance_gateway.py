"""A live gateway and worker run as the TCK meets them: the card's durability extension, a bare Message.

Separate ``longhaul gateway`` and ``longhaul worker`` processes on real PostgreSQL and NATS, with
``LONGHAUL_DEFAULT_SKILL=conformance`` and the retention and maximum pause set to odd figures, so
the card can only show them if it reads them from the settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.agent_card import DURABILITY_EXTENSION
from longhaul.settings import Settings
from tests.support.processes import LonghaulProcess, free_port, rpc, settings_env, wait_for_http


@pytest.fixture
def base(settings: Settings, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = settings_env(
        settings, port=str(port), default_skill="conformance", retention="P3DT4H", max_pause="PT6H"
    )
    processes = [LonghaulProcess([name], env, tmp_path / f"{name}.log") for name in ("gateway", "worker")]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/.well-known/agent-card.json", 30, processes[0])
        yield url
    finally:
        codes = [process.stop() for process in processes]
        assert codes == [0, 0], "\n".join(p.log() for p in processes)


def test_the_card_declares_the_durability_policy_with_the_settings_figures(base: str) -> None:
    card: dict[str, Any] = httpx.get(f"{base}/.well-known/agent-card.json").json()

    capabilities = card["capabilities"]
    assert capabilities["pushNotifications"] is True
    assert capabilities["extendedAgentCard"] is False
    (extension,) = [e for e in capabilities["extensions"] if e["uri"] == DURABILITY_EXTENSION]
    assert extension["required"] is False
    assert extension["description"]
    params = extension["params"]
    assert params["retention"] == "P3DT4H"
    assert params["retentionSeconds"] == (3 * 24 + 4) * 3600
    assert params["maxPause"] == "PT6H"
    assert params["maxPauseSeconds"] == 6 * 3600
    assert params["onRestart"] == "resume"
    assert params["streamResume"] is capabilities["streaming"]
    assert params["skillVersions"]["conformance"] == [1, 2]
    assert "conformance" in [skill["id"] for skill in card["skills"]]


def test_tck_message_response_is_answered_with_a_bare_message(base: str) -> None:
    message = {"messageId": "tck-message-response-e2e00001", "role": "ROLE_USER", "parts": [{"text": "hi"}]}

    answer = rpc(base, "SendMessage", {"message": message})

    result = answer["result"]
    assert isinstance(result, dict)
    assert set(result) == {"message"}, result
    reply = result["message"]
    assert reply["role"] == "ROLE_AGENT"
    assert reply["parts"] == [{"text": "Direct message response"}]
    task = rpc(base, "GetTask", {"id": reply["taskId"]})["result"]
    assert isinstance(task, dict)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["contextId"] == reply["contextId"]
