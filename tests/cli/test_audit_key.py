"""The checkpoint signing key: ``up`` makes one in its data directory once; a set file is only read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from longhaul import wiring
from longhaul.settings import Settings
from store.evidence.key_files import create_signer_key
from store.evidence.signed_notes import SignerKey


def test_up_makes_a_key_once_and_keeps_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(wiring.ConfigurationError, match=r"no signing key file at .*`longhaul up` makes it"):
        wiring.audit_signer(settings)
    made = wiring.audit_signer(settings, create=True)
    path = tmp_path / "data" / wiring.AUDIT_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert made.name.startswith("longhaul/")
    assert wiring.audit_signer(settings, create=True) == made  # the next start keeps it
    assert wiring.audit_signer(settings) == made  # a process beside it reads it


def test_a_set_key_file_is_read_and_never_made(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "audit.key"
    chosen = create_signer_key(path, "longhaul/acme.example.com")
    settings = Settings(data_dir=tmp_path / "data", audit_key_file=path)
    assert wiring.audit_signer(settings, create=True) == chosen
    assert not (tmp_path / "data" / wiring.AUDIT_KEY_FILE).exists()
    mistyped = Settings(data_dir=tmp_path / "data", audit_key_file=tmp_path / "keys" / "audti.key")
    with pytest.raises(wiring.ConfigurationError, match=r"no signing key file at .*audti.key$"):
        wiring.audit_signer(mistyped, create=True)
    assert not (tmp_path / "keys" / "audti.key").exists()


def test_a_key_others_may_read_stops_the_start_with_the_fix(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    wiring.audit_signer(settings, create=True)
    (tmp_path / "data" / wiring.AUDIT_KEY_FILE).chmod(0o644)
    with pytest.raises(wiring.ConfigurationError, match=r"mode 0644.*chmod 600"):
        wiring.audit_signer(settings, create=True)


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("build-7.Example.COM", "build-7.example.com"),
        ("my_laptop", "my-laptop"),
        ("-", "local"),
        ("é", "local"),
    ],
)
def test_a_host_name_becomes_a_deployment_name(host: str, name: str) -> None:
    assert wiring.deployment_name(host) == name
    SignerKey.generate(f"longhaul/{name}")  # a valid key name


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LONGHAUL_AUDIT_KEY_FILE", str(tmp_path / "audit.key"))
    assert Settings().audit_key_file == tmp_path / "audit.key"
