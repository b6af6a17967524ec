"""FileLinks: the one function every answer, frame and webhook passes through on its way to a client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.files import SCHEME, FileRef, file_part
from store.public_form import FileLinks, NotAnUploadError

SHA = "ab" * 32
PART = file_part(FileRef(SHA, 3), media_type="text/plain", filename="a.txt")


async def test_an_answer_without_a_stored_file_is_returned_itself() -> None:
    links = FileLinks("https://gw.example/")
    task: dict[str, Any] = {"id": "t", "artifacts": [{"parts": [{"text": "x"}, {"url": "https://x/y"}]}]}
    text = json.dumps(task)

    assert await links.public(task, "t") is task
    assert await links.public_text(text, "t") is text


async def test_each_stored_file_gets_the_gateways_url_and_the_rest_is_untouched() -> None:
    links = FileLinks("https://gw.example/")
    frame: dict[str, Any] = {"artifactUpdate": {"taskId": "t", "artifact": {"parts": [{"text": "x"}, PART]}}}

    shown = await links.public(frame, "t")

    assert shown["artifactUpdate"]["artifact"]["parts"] == [
        {"text": "x"},
        {**PART, "url": f"https://gw.example/a2a/files/t/{SHA}"},
    ]
    assert frame["artifactUpdate"]["artifact"]["parts"][1]["url"] == SCHEME + SHA, "the input is not changed"
    assert SCHEME not in await links.public_text(json.dumps(frame), "t")


async def test_a_store_that_signs_gives_its_url_and_one_that_does_not_the_gateways() -> None:
    async def sign(sha256: str) -> str | None:
        return f"https://bucket.example/{sha256}?sig=1" if sha256 == SHA else None

    links = FileLinks("https://gw.example", sign=sign)
    other = file_part(FileRef("cd" * 32, 1), media_type="text/plain")

    shown = await links.public({"parts": [PART, other]}, "t")

    assert [p["url"] for p in shown["parts"]] == [
        f"https://bucket.example/{SHA}?sig=1",
        f"https://gw.example/a2a/files/t/{'cd' * 32}",
    ]


def test_an_upload_url_is_recognised_by_its_prefix_and_must_name_a_hash() -> None:
    links = FileLinks("https://gw.example")

    assert links.upload_url(SHA) == f"https://gw.example/a2a/files/uploads/{SHA}"
    assert links.uploaded(links.upload_url(SHA)) == SHA
    assert links.uploaded("https://elsewhere.example/a2a/files/uploads/" + SHA) is None
    assert links.uploaded(f"https://gw.example/a2a/files/t/{SHA}") is None
    for bad in ("", SHA.upper(), SHA + "?x=1", "../" + SHA):
        with pytest.raises(NotAnUploadError):
            links.uploaded("https://gw.example/a2a/files/uploads/" + bad)
