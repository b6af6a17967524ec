"""GET /.well-known/agent-card.json: an A2A 1.0 card with cache validators."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx
from litestar import Litestar

from api.agent_card import DURABILITY_EXTENSION, FILES_EXTENSION
from store.files import FileStore
from store.secrets.secret_parts import REDACTED_PART, SECRET_EXTENSION
from tests.api.support import PUBLIC_URL, http_client


async def test_card_declares_both_bindings_jsonrpc_first_and_capabilities(client: httpx.AsyncClient) -> None:
    response = await client.get("/.well-known/agent-card.json")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    card = response.json()
    assert card["name"] == "longhaul"
    assert card["description"]
    assert card["version"]
    assert card["supportedInterfaces"] == [
        {"url": f"{PUBLIC_URL}/a2a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": f"{PUBLIC_URL}/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    capabilities = card["capabilities"]
    assert {k: v for k, v in capabilities.items() if k != "extensions"} == {
        "streaming": False,
        "pushNotifications": True,
        "extendedAgentCard": False,
    }
    assert [e["uri"] for e in capabilities["extensions"]] == [DURABILITY_EXTENSION, SECRET_EXTENSION]
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert card["defaultOutputModes"] == ["text/plain", "application/json"]


async def test_card_lists_the_newest_version_of_each_skill(client: httpx.AsyncClient) -> None:
    card = (await client.get("/.well-known/agent-card.json")).json()

    assert card["skills"] == [
        {"id": "echo", "name": "echo", "description": "Echo the text back", "tags": ["demo", "test"]},
        {"id": "research", "name": "research", "description": "Delegated research", "tags": ["research"]},
    ]


async def test_card_sends_cache_validators_and_answers_304_when_unchanged(client: httpx.AsyncClient) -> None:
    first = await client.get("/.well-known/agent-card.json")
    assert first.headers["cache-control"].startswith("public, max-age=")
    assert first.headers["last-modified"].endswith(" GMT")
    etag = first.headers["etag"]
    assert etag.startswith('"')

    again = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag

    other = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200
    assert other.json() == first.json()


async def test_the_durability_extension_carries_the_figures_the_app_was_given(
    make_app: Callable[..., Litestar],
) -> None:
    app = make_app(retention=timedelta(days=2, minutes=30), max_pause=timedelta(hours=36))
    async with http_client(app) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()

    extension, secrets = card["capabilities"]["extensions"]
    assert extension["uri"] == DURABILITY_EXTENSION
    assert extension["required"] is False
    params = extension["params"]
    assert (params["retention"], params["retentionSeconds"]) == ("P2DT30M", 2 * 86400 + 1800)
    assert (params["maxPause"], params["maxPauseSeconds"]) == ("P1DT12H", 36 * 3600)
    assert params["retentionOverridden"] is False
    assert params["streamResume"] is False  # no streams are served yet
    assert params["skillVersions"] == {"echo": [1, 2], "research": [1]}
    assert secrets["uri"] == SECRET_EXTENSION
    assert secrets["required"] is False
    assert secrets["params"]["redactedPart"] == REDACTED_PART


async def test_a_gateway_with_a_file_store_declares_files_by_reference(
    make_app: Callable[..., Litestar], tmp_path: Path
) -> None:
    files = FileStore.from_url(f"file://{tmp_path}")
    async with http_client(make_app(files=files, max_upload_bytes=1000)) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()

    extensions = card["capabilities"]["extensions"]
    assert [e["uri"] for e in extensions] == [DURABILITY_EXTENSION, SECRET_EXTENSION, FILES_EXTENSION]
    files_extension = extensions[2]
    assert files_extension["required"] is False
    assert files_extension["params"] == {
        "download": f"{PUBLIC_URL}/a2a/files/{{taskId}}/{{sha256}}",
        "upload": f"{PUBLIC_URL}/a2a/files",
        "uploadedUrl": f"{PUBLIC_URL}/a2a/files/uploads/{{sha256}}",
        "maxUploadBytes": 1000,
        "rangeRequests": True,
        "preSigned": False,
    }
