"""GET /.well-known/agent-card.json: an A2A 1.0 card with cache validators."""

from __future__ import annotations

import httpx

from tests.api.support import PUBLIC_URL


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
    assert card["capabilities"] == {"streaming": False, "pushNotifications": True}
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
