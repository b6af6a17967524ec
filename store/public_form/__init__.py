"""The log's public form: what api, workers and auditors show of events and tasks.

An event as JSON and as its NATS message, the NATS names, a task as the A2A wire ``Task`` and
``StreamResponse``, the URLs clients fetch stored files at, and a task's state as an auditor reads it.

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use: the store's packages import each other's modules, so an eager face would
import in a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.public_form.event_bodies import iso as iso
    from store.public_form.event_json import dumps as dumps
    from store.public_form.event_json import event_message as event_message
    from store.public_form.event_json import reference_message as reference_message
    from store.public_form.file_links import FILES_PATH as FILES_PATH
    from store.public_form.file_links import UPLOADS as UPLOADS
    from store.public_form.file_links import FileLinks as FileLinks
    from store.public_form.file_links import NotAnUploadError as NotAnUploadError
    from store.public_form.file_links import Sign as Sign
    from store.public_form.message_schema import EVENT_MESSAGE as EVENT_MESSAGE
    from store.public_form.stream_frames import stream_response as stream_response
    from store.public_form.subjects import NatsNames as NatsNames
    from store.public_form.subjects import server_urls as server_urls
    from store.public_form.subjects import subject_token as subject_token
    from store.public_form.task_state import task_state_json as task_state_json
    from store.public_form.task_wire import iso_millis as iso_millis
    from store.public_form.task_wire import task_to_wire as task_to_wire

_HOMES = {
    "EVENT_MESSAGE": "store.public_form.message_schema",
    "FILES_PATH": "store.public_form.file_links",
    "FileLinks": "store.public_form.file_links",
    "NotAnUploadError": "store.public_form.file_links",
    "Sign": "store.public_form.file_links",
    "UPLOADS": "store.public_form.file_links",
    "NatsNames": "store.public_form.subjects",
    "dumps": "store.public_form.event_json",
    "event_message": "store.public_form.event_json",
    "iso": "store.public_form.event_bodies",
    "iso_millis": "store.public_form.task_wire",
    "reference_message": "store.public_form.event_json",
    "server_urls": "store.public_form.subjects",
    "stream_response": "store.public_form.stream_frames",
    "subject_token": "store.public_form.subjects",
    "task_state_json": "store.public_form.task_state",
    "task_to_wire": "store.public_form.task_wire",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
