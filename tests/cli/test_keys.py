"""`longhaul keys new TENANT`, and API key settings that cannot be used."""

from __future__ import annotations

import pytest

from api.api_keys import KeyRing, parse_key_file
from longhaul.cli import main


def test_keys_new_prints_a_key_and_the_line_that_accepts_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "new", "acme"]) == 0

    key_line, id_line, file_line = capsys.readouterr().out.splitlines()
    key = key_line.rsplit(" ", 1)[1]
    key_id = id_line.rsplit(" ", 1)[1]
    line = file_line.split(": ", 1)[1]
    assert key.startswith("lh_")
    assert key not in line
    found = KeyRing(parse_key_file(line)).find(key)
    assert found is not None
    assert found.tenant == "acme"
    assert found.key_id == key_id == line.split()[0]


def test_keys_new_refuses_a_tenant_that_is_not_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "new", "acme corp"]) == 1

    assert "tenant 'acme corp'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "says"),
    [("acme", "pair 1 has no '='"), ("acme=tooshort-key", "at least 16 characters")],
)
def test_bad_api_keys_are_refused_at_start_without_showing_the_key(
    value: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LONGHAUL_API_KEYS", value)

    assert main(["gateway"]) == 2

    err = capsys.readouterr().err
    assert "LONGHAUL_API_KEYS" in err
    assert says in err
    assert "tooshort-key" not in err
