"""A2A 1.0 errors and their JSON-RPC error objects.

Every error the gateway answers with is an ``A2AError``: a JSON-RPC code, a readable message and
an ``ErrorInfo`` reason (``google.rpc.ErrorInfo``, domain ``a2a-protocol.org``). The reason is the
error type in UPPER_SNAKE_CASE without the ``Error`` suffix, as the specification names it; the
JSON-RPC standard errors follow the same rule. An error object has exactly ``code``, ``message``
and ``data`` (the A2A TCK checks that no other member appears). The HTTP+JSON binding answers the
same error as a ``google.rpc.Status`` body (``to_status``): the HTTP status, its gRPC status name,
the message, and the same details.

``a2a_error_of`` translates the application's refusals (``store.errors``) into these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import store.log as application

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
ERROR_DOMAIN = "a2a-protocol.org"


class A2AError(Exception):
    """An error answered to the client; subclasses fix the code and reason."""

    code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, *, details: Sequence[dict[str, Any]] = ()) -> None:
        self.message = message or self.default_message
        self.details = list(details)
        super().__init__(self.message)

    def to_jsonrpc(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member: ``{code, message, data}``."""
        return {"code": self.code, "message": self.message, "data": self._details()}

    def to_status(self) -> dict[str, Any]:
        """The HTTP+JSON error body: ``{"error": google.rpc.Status}`` (AIP-193)."""
        status = {"code": self.http_status, "status": self.grpc_status, "message": self.message}
        return {"error": {**status, "details": self._details()}}

    def _details(self) -> list[dict[str, Any]]:
        info = {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": ERROR_DOMAIN, "metadata": {}}
        return [info, *self.details]


class JSONParseError(A2AError):
    """The body is not JSON."""

    code, reason, http_status, default_message = -32700, "JSON_PARSE", 400, "Invalid JSON payload"
    grpc_status = "INVALID_ARGUMENT"


class InvalidRequestError(A2AError):
    """The body is JSON but not a JSON-RPC 2.0 request we answer."""

    code, reason, http_status, default_message = -32600, "INVALID_REQUEST", 400, "Invalid JSON-RPC request"
    grpc_status = "INVALID_ARGUMENT"


class RequestTooLargeError(InvalidRequestError):
    """The body is larger than the gateway accepts (answered with HTTP 413)."""

    http_status = 413


class MethodNotFoundError(A2AError):
    """The method is not an A2A 1.0 method."""

    code, reason, http_status, default_message = -32601, "METHOD_NOT_FOUND", 404, "Method not found"
    grpc_status = "NOT_FOUND"


class MethodNotAllowedError(MethodNotFoundError):
    """An HTTP+JSON route exists, but not with this HTTP method (answered with HTTP 405)."""

    http_status, grpc_status = 405, "UNIMPLEMENTED"


class InvalidParamsError(A2AError):
    """The params do not validate, or name something impossible (an unknown skill...)."""

    code, reason, http_status, default_message = -32602, "INVALID_PARAMS", 400, "Invalid parameters"
    grpc_status = "INVALID_ARGUMENT"

    @classmethod
    def with_violations(cls, message: str, violations: Sequence[tuple[str, str]]) -> InvalidParamsError:
        """An error carrying a ``google.rpc.BadRequest`` with one field violation per pair."""
        bad_request = {
            "@type": BAD_REQUEST_TYPE,
            "fieldViolations": [{"field": field, "description": text} for field, text in violations],
        }
        return cls(message, details=[bad_request])


class InternalError(A2AError):
    """Something failed on our side; the message never carries internals."""


class TaskNotFoundError(A2AError):
    """No visible task has this id (missing, expired or another tenant's: never distinguished)."""

    code, reason, http_status, default_message = -32001, "TASK_NOT_FOUND", 404, "Task not found"
    grpc_status = "NOT_FOUND"


class TaskNotCancelableError(A2AError):
    """The task is terminal."""

    code, reason, http_status, default_message = -32002, "TASK_NOT_CANCELABLE", 400, "Task cannot be canceled"
    grpc_status = "FAILED_PRECONDITION"


class PushNotificationNotSupportedError(A2AError):
    """The agent card declares no push notifications."""

    code, reason, http_status = -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "Push notifications are not supported"


class UnsupportedOperationError(A2AError):
    """The operation is not possible here, or not on this task in its state."""

    code, reason, http_status = -32004, "UNSUPPORTED_OPERATION", 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(A2AError):
    """The request (or a part) has a media type we do not accept."""

    code, reason, http_status = -32005, "CONTENT_TYPE_NOT_SUPPORTED", 415  # the specification, §5.4
    grpc_status = "INVALID_ARGUMENT"
    default_message = "Incompatible content types"


class VersionNotSupportedError(A2AError):
    """The client asked for an A2A version other than 1.0."""

    code, reason, http_status = -32009, "VERSION_NOT_SUPPORTED", 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "A2A version not supported"


class UnauthenticatedError(A2AError):
    """No API key, or one the gateway does not know (HTTP 401 with ``WWW-Authenticate: Bearer``).

    A2A defines no code for it: it takes -32000, the first of JSON-RPC's implementation-defined
    server errors, and ErrorInfo tells it apart (the A2A errors use -32001 and up).
    """

    code, reason, http_status, grpc_status = -32000, "UNAUTHENTICATED", 401, "UNAUTHENTICATED"
    default_message = "Authentication required: send Authorization: Bearer <API key>"


class ResourceExhaustedError(A2AError):
    """The gateway has as many requests in flight as it takes (HTTP 429 with ``Retry-After``)."""

    code, reason, http_status, grpc_status = -32000, "RESOURCE_EXHAUSTED", 429, "RESOURCE_EXHAUSTED"
    default_message = "Too many requests in flight; retry after the Retry-After delay"


class SlowReaderError(A2AError):
    """A stream's client read too slowly: the stream was closed; it resumes with ``Last-Event-ID``.

    Sent only as the last frame of a stream (``api.streams``), never before one.
    """

    code, reason, http_status, grpc_status = -32603, "SLOW_READER", 503, "UNAVAILABLE"
    default_message = "The stream was closed because the client read it too slowly"


KEPT_CHANGING = "the task kept changing while this request ran; retry it"


def a2a_error_of(error: application.ApplicationError | application.ConflictError) -> A2AError:
    """The A2A error a refusal of the application answers with (its message as the application's).

    A lost race that outlived every retry is an internal error the client may retry.
    """
    if isinstance(error, application.TaskNotFoundError):  # missing, another tenant's, or expired
        return TaskNotFoundError(str(error))
    if isinstance(
        error,
        application.ContextMismatchError
        | application.PushUrlRefusedError
        | application.TooManyPushConfigsError,
    ):
        return InvalidParamsError(str(error))
    if isinstance(error, application.TaskIdCollisionError):
        return InternalError(str(error))
    if isinstance(error, application.ConflictError):
        return InternalError(KEPT_CHANGING)
    return InternalError()
