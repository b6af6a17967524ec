"""The ``a2a-sdk`` 1.3 reference server with a completing echo executor: the benchmarks' baseline.

Serves JSON-RPC at ``/a2a/jsonrpc``, HTTP+JSON under ``/a2a/rest`` and the agent card at
``/.well-known/agent-card.json`` (streaming declared), through the SDK's own Starlette routes and
``DefaultRequestHandler``, on uvicorn as longhaul's gateway is. The task store is the SDK's
``InMemoryTaskStore`` or its SQLAlchemy ``DatabaseTaskStore`` (asyncpg) on PostgreSQL, in the
schema given (its table ``tasks`` is made there at start).

The executor does what longhaul's echo skill does: the task (submitted), working, one artifact with
the message's text, completed.

    uv run python -m bench.a2a_sdk_server --port 8090 [--store memory|postgres]
        [--database-url postgresql://postgres@127.0.0.1:5432/test --schema NAME]
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from bench.common import DEFAULT_DATABASE_URL
from longhaul.serving import listen

JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"


class EchoExecutor(AgentExecutor):
    """Completes every task at once with the text it was sent, as one artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        if context.current_task is None:  # the SDK wants the Task first
            history = [context.message] if context.message is not None else []
            task = new_task(
                context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=history
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        await updater.add_artifact([Part(text=context.get_user_input())], artifact_id="echo", name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(base_url: str) -> AgentCard:
    """Both bindings, streaming, one echo skill."""
    return AgentCard(
        name="a2a-sdk echo",
        description="The a2a-sdk 1.3 reference server with a completing echo executor.",
        version="1.3.0",
        supported_interfaces=[
            AgentInterface(url=base_url + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=base_url + REST_PATH, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes the text.", tags=["bench"])],
    )


def task_store(store: str, database_url: str, schema: str | None, pool_size: int) -> TaskStore:
    """The SDK's in-memory store, or its database store on ``schema`` (asyncpg, ``pool_size`` + as many)."""
    if store == "memory":
        return InMemoryTaskStore()
    url = database_url.replace("postgresql://", "postgresql+asyncpg://", 1)
    server_settings = {"search_path": schema} if schema else {}
    engine = create_async_engine(
        url, pool_size=pool_size, max_overflow=pool_size, connect_args={"server_settings": server_settings}
    )
    return DatabaseTaskStore(engine)


async def serve(args: argparse.Namespace) -> None:
    base_url = f"http://127.0.0.1:{args.port}"
    card = agent_card(base_url)
    store = task_store(args.store, args.database_url, args.schema, args.pool_size)
    if isinstance(store, DatabaseTaskStore):
        await store.initialize()  # make the table before the first request, not during it
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(), task_store=store, agent_card=card)
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url=JSONRPC_PATH),
        *create_rest_routes(handler, path_prefix=REST_PATH),
    ]
    # longhaul's gateway's listening socket (TCP_NODELAY on accepted connections), not its uvicorn settings
    config = uvicorn.Config(Starlette(routes=routes), log_level="warning", access_log=False)
    await uvicorn.Server(config).serve(sockets=[listen("127.0.0.1", args.port)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", choices=["memory", "postgres"], default="memory")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--schema", help="PostgreSQL schema for the SDK's tasks table (must exist)")
    parser.add_argument("--pool-size", type=int, default=8, help="connections (+ as many overflow): up's 8")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
