"""Fixtures for the skill tests: a real fake IAM over HTTP, fresh for each test."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from longhaul.demo.fake_iam import running


@pytest.fixture
def iam_url() -> Iterator[str]:
    """Base URL of a fake IAM with empty memory, served from a thread on a free port."""
    with running() as url:
        yield url


@pytest.fixture
def iam_calls(iam_url: str) -> Iterator[httpx.Client]:
    """A client of the same fake IAM, for reading ``/calls``."""
    with httpx.Client(base_url=iam_url, timeout=10) as client:
        yield client
