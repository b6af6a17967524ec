"""``longhaul dispatcher`` and ``longhaul deliveries``: one-line refusals, the webhook secret file."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from longhaul import wiring
from longhaul.cli import main
from longhaul.settings import Settings
from workers.webhook_signing import new_secret, secret_key


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("LONGHAUL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LONGHAUL_DATA_DIR", str(tmp_path / "data"))


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("longhaul: ")
    return lines[0]


@pytest.mark.usefixtures("clean_environment")
def test_the_dispatcher_refuses_an_in_memory_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_STORE", "memory")
    assert main(["dispatcher"]) == 1
    assert "the dispatcher needs LONGHAUL_STORE=postgres" in _one_line(capsys.readouterr().err)


@pytest.mark.usefixtures("clean_environment")
def test_the_dispatcher_refuses_to_start_without_a_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/none")
    monkeypatch.setenv("LONGHAUL_NATS_URL", "nats://127.0.0.1:1")
    assert main(["dispatcher"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "LONGHAUL_WEBHOOK_SECRET is not set" in line
    assert "whsec_" in line  # a fresh secret to use


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize(
    ("variable", "value"),
    [("LONGHAUL_WEBHOOK_SECRET", "not-a-secret"), ("LONGHAUL_WEBHOOK_SECRETS", '{"acme": "whsec_c2hvcnQ="}')],
)
def test_a_malformed_webhook_secret_is_refused_at_start(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["dispatcher"]) == 2
    err = capsys.readouterr().err
    assert variable in err
    assert "webhook secret" in err


def test_up_makes_a_secret_once_and_keeps_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(wiring.ConfigurationError, match="LONGHAUL_WEBHOOK_SECRET is not set"):
        wiring.webhook_signer(settings)
    made = wiring.webhook_signer(settings, create=True).default
    secret_key(made)
    path = tmp_path / "data" / wiring.WEBHOOK_SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert wiring.webhook_signer(settings, create=True).default == made  # the next start keeps it
    assert wiring.webhook_signer(settings).default == made  # a dispatcher beside it reads it
    chosen = new_secret()
    override = Settings(data_dir=tmp_path / "data", webhook_secret=chosen, webhook_secrets={"acme": made})
    signer = wiring.webhook_signer(override)
    assert (signer.default, dict(signer.per_tenant)) == (chosen, {"acme": made})


def test_deliveries_of_an_unknown_task_is_one_line(cli: Callable[..., tuple[int, str, str]]) -> None:
    task_id = uuid.uuid4()
    code, _, err = cli("deliveries", str(task_id))
    assert code == 1
    assert _one_line(err).startswith(f"longhaul: no task {task_id}")
