"""The servers the request-path part starts, each its own process.

- ``longhaul``: ``longhaul up`` on the machine's PostgreSQL (a fresh schema) and NATS, echo skill:
  the gateway, a worker and every follower of the log (relay, projector, dispatcher, sequencer);
- ``longhaul-answer``: ``longhaul gateway`` alone on the same services: the request path and its
  durable commit, nothing that runs the task or follows the log. It answers returnImmediately
  and a stream's first event (the task as committed); nothing ends its tasks, so it is measured
  in those two modes only;
- ``sdk-memory``: ``bench.a2a_sdk_server`` with the a2a-sdk's ``InMemoryTaskStore``;
- ``sdk-postgres``: the same with the SDK's ``DatabaseTaskStore`` (asyncpg) in a fresh schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.common import Options, free_port, fresh_schema, longhaul_env, process_env, serving, stream_deleted

SERVERS = ("longhaul", "longhaul-answer", "sdk-memory", "sdk-postgres")
ANSWER_ONLY = "longhaul-answer"
ANSWER_MODES = ("immediately", "stream")
"""The modes the request path alone answers (nothing runs its tasks to an end)."""


@contextmanager
def servers(
    names: list[str], options: Options, folder: Path, **settings: Any
) -> Iterator[dict[str, tuple[str, int]]]:
    """Start the servers named (``settings``: more of the longhaul servers' settings): each one's
    base URL and process id; at the end, stop them and drop their schemas and streams."""
    with ExitStack() as stack:
        urls: dict[str, tuple[str, int]] = {}
        for name in names:
            port = free_port()
            if name.startswith("longhaul"):
                schema = stack.enter_context(fresh_schema(options.database_url, "a2a"))
                stream = stack.enter_context(stream_deleted(options.nats_url, f"BENCH_{schema}"))
                env = longhaul_env(
                    options.database_url,
                    schema,
                    nats_url=options.nats_url,
                    nats_stream=stream,
                    nats_subject_prefix=f"bench{schema}",
                    data_dir=folder / name,
                    port=port,
                    **settings,
                )
                module = ["longhaul.cli", "gateway" if name == ANSWER_ONLY else "up"]
            else:
                store = name.removeprefix("sdk-")
                env = process_env()
                module = ["bench.a2a_sdk_server", "--port", str(port), "--store", store]
                if store == "postgres":
                    schema = stack.enter_context(fresh_schema(options.database_url, "sdk"))
                    module += ["--database-url", options.database_url, "--schema", schema]
            process = stack.enter_context(serving(module, env, folder / f"{name}.log", port))
            urls[name] = (f"http://127.0.0.1:{port}", process.pid)
        yield urls
