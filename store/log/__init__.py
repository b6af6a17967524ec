"""The log: the task application and its use cases, and what it stands on.

The recorders (PostgreSQL and memory) with the run queue, migrations, the one retry policy, and
the one way to reach the database.

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use: the store's packages import each other's modules, so an eager face would
import in a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.log.application import APP_NAME as APP_NAME
    from store.log.application import SNAPSHOT_INTERVAL as SNAPSHOT_INTERVAL
    from store.log.application import TaskApplication as TaskApplication
    from store.log.config import MemoryConfig as MemoryConfig
    from store.log.config import StoreConfig as StoreConfig
    from store.log.errors import AnswerTooLateError as AnswerTooLateError
    from store.log.errors import ApplicationError as ApplicationError
    from store.log.errors import ConflictError as ConflictError
    from store.log.errors import ContextMismatchError as ContextMismatchError
    from store.log.errors import NoSuchVersionError as NoSuchVersionError
    from store.log.errors import NotWaitingForInputError as NotWaitingForInputError
    from store.log.errors import PushUrlRefusedError as PushUrlRefusedError
    from store.log.errors import RetentionNotReachedError as RetentionNotReachedError
    from store.log.errors import TaskIdCollisionError as TaskIdCollisionError
    from store.log.errors import TaskNotFoundError as TaskNotFoundError
    from store.log.errors import TooManyPushConfigsError as TooManyPushConfigsError
    from store.log.group_calls import GroupedCalls as GroupedCalls
    from store.log.locks import Leader as Leader
    from store.log.locks import advisory_key as advisory_key
    from store.log.locks import leading as leading
    from store.log.memory import MemoryRunQueueRecorder as MemoryRunQueueRecorder
    from store.log.migrations import SchemaTooNewError as SchemaTooNewError
    from store.log.migrations import migrate as migrate
    from store.log.postgres import PostgresRunQueueRecorder as PostgresRunQueueRecorder
    from store.log.postgres import select_events_at as select_events_at
    from store.log.reads import read_statement as read_statement
    from store.log.reads import read_transaction as read_transaction
    from store.log.relay_positions import RelayPosition as RelayPosition
    from store.log.relay_positions import read_relay_positions as read_relay_positions
    from store.log.retention import RetentionPolicy as RetentionPolicy
    from store.log.retention import parse_key as parse_key
    from store.log.retention import span as span
    from store.log.retry import RESTART_POLICY as RESTART_POLICY
    from store.log.retry import Command as Command
    from store.log.retry import retry_lost_connection as retry_lost_connection
    from store.log.retry import webhook_retry as webhook_retry
    from store.log.run_queue import RunQueue as RunQueue
    from store.log.statistics import REFRESH_EVERY_S as REFRESH_EVERY_S

_HOMES = {
    "APP_NAME": "store.log.application",
    "AnswerTooLateError": "store.log.errors",
    "ApplicationError": "store.log.errors",
    "Command": "store.log.retry",
    "ConflictError": "store.log.errors",
    "ContextMismatchError": "store.log.errors",
    "GroupedCalls": "store.log.group_calls",
    "Leader": "store.log.locks",
    "MemoryConfig": "store.log.config",
    "MemoryRunQueueRecorder": "store.log.memory",
    "NoSuchVersionError": "store.log.errors",
    "NotWaitingForInputError": "store.log.errors",
    "PostgresRunQueueRecorder": "store.log.postgres",
    "PushUrlRefusedError": "store.log.errors",
    "REFRESH_EVERY_S": "store.log.statistics",
    "RESTART_POLICY": "store.log.retry",
    "RelayPosition": "store.log.relay_positions",
    "RetentionNotReachedError": "store.log.errors",
    "RetentionPolicy": "store.log.retention",
    "span": "store.log.retention",
    "RunQueue": "store.log.run_queue",
    "SNAPSHOT_INTERVAL": "store.log.application",
    "SchemaTooNewError": "store.log.migrations",
    "StoreConfig": "store.log.config",
    "TaskApplication": "store.log.application",
    "TaskIdCollisionError": "store.log.errors",
    "TaskNotFoundError": "store.log.errors",
    "TooManyPushConfigsError": "store.log.errors",
    "advisory_key": "store.log.locks",
    "leading": "store.log.locks",
    "migrate": "store.log.migrations",
    "parse_key": "store.log.retention",
    "read_statement": "store.log.reads",
    "read_transaction": "store.log.reads",
    "read_relay_positions": "store.log.relay_positions",
    "retry_lost_connection": "store.log.retry",
    "select_events_at": "store.log.postgres",
    "webhook_retry": "store.log.retry",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
