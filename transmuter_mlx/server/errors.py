"""The server's errors, as the OpenAI API shapes them: ``{"error": {"message", "type", "param", "code"}}``.

>>> e = BadRequest("max_tokens must be a positive integer", param="max_tokens")
>>> e.status, e.body()["error"]["type"]
(400, 'invalid_request_error')
"""

from __future__ import annotations

from typing import Any

__all__ = ["APIError", "BadRequest", "NotFound", "PayloadTooLarge", "QueueFull", "Timeout", "Unauthorized", "Unavailable"]


class APIError(Exception):
    """An error a request gets as an HTTP status and a JSON body (``headers``: e.g. ``Retry-After``)."""

    status = 500
    kind = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class BadRequest(APIError):
    """400: malformed JSON, a wrong field type or value, an input the model cannot take."""

    status, kind = 400, "invalid_request_error"


class Unauthorized(APIError):
    """401: the bearer key is missing or wrong."""

    status, kind = 401, "authentication_error"


class NotFound(APIError):
    """404: no such model (or route)."""

    status, kind = 404, "not_found_error"


class PayloadTooLarge(APIError):
    """413: the request body is over ``--max-request-bytes``."""

    status, kind = 413, "invalid_request_error"


class QueueFull(APIError):
    """429: the model's queue holds ``--max-queue`` requests; ``Retry-After`` says when to come back."""

    status, kind = 429, "rate_limit_error"


class Unavailable(APIError):
    """503: the server is shutting down."""

    status, kind = 503, "server_error"


class Timeout(APIError):
    """504: the request ran past ``--request-timeout``."""

    status, kind = 504, "timeout_error"
