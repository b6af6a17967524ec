"""Fixtures of the browser tests: Debian's ``chromium`` driven by Playwright, and the process cluster.

Playwright's own browser download is not used: the tests launch the ``chromium`` found on
``PATH`` (``.ci/run`` installs it with apt-get when it is missing). As root, chromium needs
``--no-sandbox``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.crash.conftest import cluster

__all__ = ["browser", "cluster"]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]


@pytest.fixture
def browser() -> Iterator[Browser]:
    """A headless chromium of this test's own, closed afterwards."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("the browser tests need Debian's chromium: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
