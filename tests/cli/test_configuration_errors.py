"""A skill module that cannot be used stops a command with one clear line, not a traceback."""

from __future__ import annotations

import pytest

from longhaul import wiring
from longhaul.cli import main
from longhaul.settings import Settings


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("no_such_module_anywhere", "cannot import 'no_such_module_anywhere'"),
        ("json", "must define SKILLS as a list of domain.skill.Skill"),
    ],
)
def test_a_bad_skill_module_is_named(
    module: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_SKILL_MODULES", f'["{module}"]')

    assert main(["skills"]) == 1

    err = capsys.readouterr().err
    assert err.startswith("longhaul: ")
    assert says in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ('{"acme": "P1D"}', "bad retention override key 'acme'"),
        ('{"skill:research": "-P1D"}', "must be positive"),
    ],
)
def test_bad_retention_overrides_are_refused_at_start(
    overrides: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_RETENTION_OVERRIDES", overrides)

    assert main(["sweeper"]) == 2

    err = capsys.readouterr().err
    assert "LONGHAUL_RETENTION_OVERRIDES" in err
    assert says in err


def test_a_nats_cluster_is_several_urls_separated_by_commas() -> None:
    settings = Settings(nats_url=" nats://10.0.0.1:4222, nats://10.0.0.2:4222 ,tls://10.0.0.3:4222")

    assert settings.nats_url == "nats://10.0.0.1:4222,nats://10.0.0.2:4222,tls://10.0.0.3:4222"
    assert wiring.nats_names(settings).urls == [
        "nats://10.0.0.1:4222",
        "nats://10.0.0.2:4222",
        "tls://10.0.0.3:4222",
    ]


def test_each_nats_url_of_a_list_is_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_NATS_URL", "nats://10.0.0.1:4222,10.0.0.2:4222")

    assert main(["relay"]) == 2

    err = capsys.readouterr().err
    assert "LONGHAUL_NATS_URL" in err
    assert "must start with nats://" in err
