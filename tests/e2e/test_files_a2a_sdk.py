"""docs/skills.md's PDF skill, served by ``longhaul up``, fetched by a new user with the a2a-sdk client.

The skill module is the doc's own block ("## Files"), written to a folder on ``PYTHONPATH`` and
named in ``LONGHAUL_SKILL_MODULES``, as a user would deploy it. The a2a-sdk client (both bindings)
sends a message, gets the completed task, finds the file part's URL and fetches the bytes with
plain HTTP: they hash to the SHA-256 the part names, and ``big-file``'s chunks downloaded in order
are the skill's content. A ranged request resumes a download.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from a2a.client import Client, ClientConfig, create_client
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState

from tests.e2e.test_skills_doc_example import ROOT
from tests.support.up_server import up_server
from workers.skills.big_file import content

BINDINGS = ["JSONRPC", "HTTP+JSON"]


def doc_skill_module() -> str:
    """The Python block of docs/skills.md's "## Files" that defines ``SKILLS``."""
    doc = (ROOT / "docs" / "skills.md").read_text()
    section = doc[doc.index("## Files") :]
    section = section[: section.find("\n## ", 1)]
    blocks = [block[: block.index("```\n")] for block in section.split("```python\n")[1:]]
    [module] = [block for block in blocks if "\nSKILLS = " in block]
    return module


@pytest.fixture(scope="module")
def gateway(database_url: str, nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``longhaul up`` serving the doc's skill module; yields its base URL."""
    folder = tmp_path_factory.mktemp("files-sdk")
    modules = folder / "modules"
    modules.mkdir()
    (modules / "pdf_report_skill.py").write_text(doc_skill_module())
    with up_server(
        database_url, nats_url, folder, pythonpath=(modules, ROOT), skill_modules=["pdf_report_skill"]
    ) as base:
        yield base


@pytest_asyncio.fixture(params=BINDINGS)
async def client(gateway: str, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(timeout=60.0) as http:
        card = await A2ACardResolver(http, gateway).get_agent_card()
        config = ClientConfig(supported_protocol_bindings=[request.param], streaming=False, httpx_client=http)
        made = await create_client(card, client_config=config)
        try:
            yield made
        finally:
            await made.close()


def message(skill: str, text: str, data: dict[str, object] | None = None) -> SendMessageRequest:
    parts = [Part(text=text)]
    if data is not None:
        part = Part()
        part.data.struct_value.update(data)
        parts.append(part)
    sent = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=parts)
    sent.metadata.update({"skill": skill})
    return SendMessageRequest(message=sent)


async def completed(client: Client, request: SendMessageRequest) -> Task:
    [answer] = [event async for event in client.send_message(request)]
    assert answer.HasField("task"), answer
    assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED, answer.task.status
    return answer.task


async def test_a_user_fetches_the_pdf_the_doc_s_skill_wrote(client: Client) -> None:
    task = await completed(client, message("pdf-report", "report please"))

    [artifact] = [a for a in task.artifacts if a.artifact_id == "report.pdf"]
    [part] = artifact.parts
    assert part.url.startswith("http://127.0.0.1:")
    assert "/a2a/files/" in part.url
    assert part.media_type == "application/pdf"
    assert part.filename == "report.pdf"
    sha256 = part.metadata["sha256"]
    async with httpx.AsyncClient(timeout=60.0) as http:
        got = await http.get(part.url)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"].startswith("application/pdf")
        assert hashlib.sha256(got.content).hexdigest() == sha256
        assert got.content.startswith(b"%PDF-")
        # A broken download resumes where it stopped.
        rest = await http.get(part.url, headers={"Range": "bytes=1000-"})
        assert rest.status_code == 206
        assert got.content[:1000] + rest.content == got.content


async def test_big_file_s_chunks_downloaded_in_order_are_its_content(client: Client) -> None:
    size, chunk = 3 * (1 << 20) + 77_777, 1 << 20
    task = await completed(
        client, message("big-file", "go", {"bytes": size, "seed": 5, "chunk_bytes": chunk})
    )

    [artifact] = [a for a in task.artifacts if a.artifact_id == "big-file.bin"]
    assert len(artifact.parts) == 4
    downloaded = bytearray()
    async with httpx.AsyncClient(timeout=60.0) as http:
        for part in artifact.parts:
            got = await http.get(part.url)
            assert got.status_code == 200, got.text
            assert hashlib.sha256(got.content).hexdigest() == part.metadata["sha256"]
            downloaded += got.content
    assert bytes(downloaded) == content(5, 0, size)
