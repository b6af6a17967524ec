"""A misspelt ``LONGHAUL_*`` variable is named in a warning, with the setting it was meant to be."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from longhaul.settings import NOT_SETTINGS, unknown_variables, variable_names


@pytest.mark.parametrize(
    ("name", "warning"),
    [
        (
            "LONGHAUL_WORKER_CONCURENCY",
            (
                "LONGHAUL_WORKER_CONCURENCY is not a setting and is ignored"
                " (did you mean LONGHAUL_WORKER_CONCURRENCY?)"
            ),
        ),
        ("LONGHAUL_PORTT", "LONGHAUL_PORTT is not a setting and is ignored (did you mean LONGHAUL_PORT?)"),
        (
            "longhaul_natsurl",
            "longhaul_natsurl is not a setting and is ignored (did you mean LONGHAUL_NATS_URL?)",
        ),
        ("LONGHAUL_BANANA", "LONGHAUL_BANANA is not a setting and is ignored"),
    ],
)
def test_an_unknown_variable_is_named_with_the_closest_setting(name: str, warning: str) -> None:
    assert unknown_variables({name: "1"}) == [warning]


def test_settings_other_variables_and_the_test_suites_own_do_not_warn() -> None:
    environ = dict.fromkeys([*variable_names(), *NOT_SETTINGS, "PATH", "HOME", "LONGHAULX"], "x")
    assert unknown_variables(environ) == []


def test_the_cli_warns_once_per_unknown_variable_on_stderr() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGHAUL_")}
    env.update(
        LONGHAUL_STORE="memory",  # `migrate` then stops at once: nothing to migrate
        LONGHAUL_LEASE_SECOND="5",
        LONGHAUL_TEST_DATABASE_URL="postgresql://nowhere/test",
    )
    done = subprocess.run(
        [sys.executable, "-m", "longhaul.cli", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    warnings = [line for line in done.stderr.splitlines() if "is not a setting" in line]
    assert len(warnings) == 1
    assert (
        "LONGHAUL_LEASE_SECOND is not a setting and is ignored (did you mean LONGHAUL_LEASE_SECONDS?)"
        in (warnings[0])
    )
    assert "TEST_DATABASE_URL" not in done.stderr
    assert done.returncode == 1
