"""Pydantic v2 models of the A2A 1.0 JSON shapes the gateway reads and writes.

Field names are snake_case in Python and camelCase on the wire (ProtoJSON). Unknown members are
ignored, as the specification asks. Values are read as ProtoJSON writes them: an integer field
(``HistoryLength``, ``PageSize``) takes a JSON number with no fraction (``3`` or ``3.0``, as a
protobuf ``Struct`` carries every number) or a decimal string (``"3"``, as 64-bit integers
travel), a boolean only ``true`` or ``false``. Requests are validated with these models; responses are built
as plain JSON by ``store.public_form.task_wire`` and these models describe (and, in tests, check) their shape.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from api.errors import InvalidParamsError
from domain.states import TaskState

JSON = dict[str, Any]

Role = Literal["ROLE_USER", "ROLE_AGENT"]

INT32_MAX = 2**31 - 1
INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _proto_int(value: object) -> object:
    """A ProtoJSON integer as a Python ``int``; anything else is left for ``StrictInt`` to refuse."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and INTEGER_TEXT.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT32_MAX:
        raise ValueError(f"{value} is out of range for a 32-bit integer")
    return value


DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100

# An ``int32`` field: ``3``, ``3.0`` and ``"3"`` are 3; ``3.5``, ``true`` and ``"three"`` are refused.
# The bounds come before the validator, so that they stay numeric bounds in the JSON Schema.
HistoryLength = Annotated[StrictInt, Field(ge=0), BeforeValidator(_proto_int)]
PageSize = Annotated[StrictInt, Field(ge=1, le=MAX_PAGE_SIZE), BeforeValidator(_proto_int)]


class WireModel(BaseModel):
    """Base: camelCase aliases on the wire, unknown members ignored.

    The proto field names (``task_id``) are accepted too: ProtoJSON parsers take both spellings.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    def to_json(self) -> JSON:
        """The model as wire JSON: camelCase, absent members omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Part(WireModel):
    """One piece of content: exactly one of ``text``, ``raw`` (base64), ``url`` or ``data``."""

    text: StrictStr | None = None
    raw: StrictStr | None = None
    url: StrictStr | None = None
    data: Any = None
    metadata: JSON | None = None
    filename: StrictStr | None = None
    media_type: StrictStr | None = None

    @field_validator("raw")
    @classmethod
    def _raw_is_base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as error:
                raise ValueError("raw must be base64") from error
        return value

    @model_validator(mode="after")
    def _exactly_one_content(self) -> Part:
        present = [name for name in ("text", "raw", "url", "data") if getattr(self, name) is not None]
        if len(present) != 1:
            raise ValueError(f"a part has exactly one of text, raw, url or data (got {present or 'none'})")
        return self


class Message(WireModel):
    """A message between client and agent."""

    message_id: StrictStr = Field(min_length=1)
    role: Role
    parts: list[Part] = Field(min_length=1)
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    metadata: JSON | None = None
    extensions: list[StrictStr] | None = None
    reference_task_ids: list[StrictStr] | None = None


class Artifact(WireModel):
    """An output of a task."""

    artifact_id: StrictStr = Field(min_length=1)
    parts: list[Part] = Field(min_length=1)
    name: StrictStr | None = None
    description: StrictStr | None = None
    metadata: JSON | None = None
    extensions: list[StrictStr] | None = None


class TaskStatus(WireModel):
    """A task's state, with the agent's latest status message."""

    state: TaskState  # the domain's enum: its values are the A2A 1.0 spellings
    message: Message | None = None
    timestamp: StrictStr | None = None


class WireTask(WireModel):
    """A task as GetTask and SendMessage return it."""

    id: StrictStr
    context_id: StrictStr
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: JSON | None = None


class AuthenticationInfo(WireModel):
    """How the agent authenticates to a webhook: ``Authorization: {scheme} {credentials}``."""

    scheme: StrictStr = Field(min_length=1)
    credentials: StrictStr | None = None


class TaskPushNotificationConfig(WireModel):
    """A webhook for a task's updates; params of ``CreateTaskPushNotificationConfig``.

    ``id`` is the client's, or generated when empty; ``taskId`` is required by Create and left
    empty inline (``SendMessageConfiguration``), where the task is the message's.
    """

    url: StrictStr = Field(min_length=1)
    id: StrictStr | None = None
    task_id: StrictStr | None = None
    tenant: StrictStr | None = None
    token: StrictStr | None = None
    authentication: AuthenticationInfo | None = None


class SendMessageConfiguration(WireModel):
    """How the client wants SendMessage to answer."""

    accepted_output_modes: list[StrictStr] | None = None
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: HistoryLength | None = None
    return_immediately: StrictBool = False


class SendMessageRequest(WireModel):
    """Params of ``SendMessage``."""

    message: Message
    tenant: StrictStr | None = None
    configuration: SendMessageConfiguration | None = None
    metadata: JSON | None = None

    @field_validator("message")
    @classmethod
    def _from_the_user(cls, message: Message) -> Message:
        if message.role != "ROLE_USER":
            raise ValueError("a client's message has role ROLE_USER")
        return message


class GetTaskRequest(WireModel):
    """Params of ``GetTask``."""

    id: StrictStr = Field(min_length=1)
    history_length: HistoryLength | None = None
    tenant: StrictStr | None = None


class CancelTaskRequest(WireModel):
    """Params of ``CancelTask``."""

    id: StrictStr = Field(min_length=1)
    metadata: JSON | None = None
    tenant: StrictStr | None = None


class SubscribeToTaskRequest(WireModel):
    """Params of ``SubscribeToTask``."""

    id: StrictStr = Field(min_length=1)
    tenant: StrictStr | None = None


class GetTaskPushNotificationConfigRequest(WireModel):
    """Params of ``GetTaskPushNotificationConfig``."""

    task_id: StrictStr = Field(min_length=1)
    id: StrictStr = Field(min_length=1)
    tenant: StrictStr | None = None


class DeleteTaskPushNotificationConfigRequest(WireModel):
    """Params of ``DeleteTaskPushNotificationConfig``."""

    task_id: StrictStr = Field(min_length=1)
    id: StrictStr = Field(min_length=1)
    tenant: StrictStr | None = None


UNSPECIFIED_STATE = "TASK_STATE_UNSPECIFIED"
"""The proto's zero value of ``TaskState``: as a ListTasks filter it means no filter."""


class ListTasksRequest(WireModel):
    """Params of ``ListTasks``."""

    tenant: StrictStr | None = None
    context_id: StrictStr | None = None
    status: TaskState | None = None
    page_size: PageSize | None = None
    page_token: StrictStr | None = None
    history_length: HistoryLength | None = None
    status_timestamp_after: datetime | None = None
    include_artifacts: StrictBool | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _unspecified_is_no_filter(cls, value: object) -> object:
        return None if value == UNSPECIFIED_STATE else value

    @field_validator("status_timestamp_after", mode="before")
    @classmethod
    def _a_timestamp(cls, value: object) -> object:
        """An RFC 3339 timestamp with an offset (``2026-03-01T09:30:00.000Z``), nothing else."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError("must be an RFC 3339 timestamp string, e.g. 2026-03-01T09:30:00.000Z")
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            example = "2026-03-01T09:30:00.000Z"
            raise ValueError(f"{value!r} is not an RFC 3339 timestamp, e.g. {example}") from None
        if moment.utcoffset() is None:
            raise ValueError(f"{value!r} has no time zone; end it with Z (UTC)")
        return moment


class ListTaskPushNotificationConfigsRequest(WireModel):
    """Params of ``ListTaskPushNotificationConfigs``; every config fits one page (the token is ignored)."""

    task_id: StrictStr = Field(min_length=1)
    page_size: PageSize | None = None
    page_token: StrictStr | None = None
    tenant: StrictStr | None = None


M = TypeVar("M", bound=WireModel)


class JsonRpcRequest(BaseModel):
    """A JSON-RPC 2.0 request envelope. ``id`` is required: A2A has no notifications."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    jsonrpc: Literal["2.0"]
    id: StrictStr | StrictInt | None
    method: StrictStr = Field(min_length=1)
    params: JSON | list[Any] | None = None


def parse_params(model: type[M], params: JSON | list[Any] | None) -> M:
    """Validate ``params`` as ``model``, or raise ``InvalidParamsError`` listing every field error.

    Omitted params (JSON-RPC 2.0 lets a request leave them out) are an empty object: a method
    whose params are all optional (ListTasks) takes them, one that needs a field names it.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParamsError.with_violations(
            "invalid params: params must be a JSON object", [("params", "must be a JSON object")]
        )
    try:
        return model.model_validate(params)
    except ValidationError as error:
        violations = [(_field_path(e["loc"]), e["msg"]) for e in error.errors(include_url=False)]
        listed = "; ".join(f"{field}: {text}" if field else text for field, text in violations)
        raise InvalidParamsError.with_violations(f"invalid params: {listed}", violations) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for item in loc:
        path += f"[{item}]" if isinstance(item, int) else (f".{item}" if path else item)
    return path
