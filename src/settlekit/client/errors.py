"""What the client raises: the API's problem+json answers as `ApiError` (the server's code, status, detail and
requestId, in the same catalogue as the server's own errors), an unreachable API, and the spool's refusals."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from settlekit.errors import ConflictError, NotFoundError, SettlekitError, ValidationError


class ApiError(SettlekitError):
    """An error answer of the API. `code`, `status` and `message` (the problem's `detail`) are the server's;
    `problem` is the whole problem+json body, `request_id` the request's id (quote it when reporting), and
    `retry_after` the Retry-After in seconds when the server gave one."""

    def __init__(self, status: int, problem: Mapping[str, Any], *, retry_after: float | None = None):
        code = problem.get("code")
        detail = problem.get("detail")
        details = problem.get("details")
        super().__init__(str(detail) if detail is not None else f"HTTP {status}",
                         code=code if isinstance(code, str) and code else f"HTTP_{status}", status=status,
                         **(details if isinstance(details, dict) else {}))
        self.problem: dict[str, Any] = dict(problem)
        request_id = problem.get("requestId")
        self.request_id: str | None = request_id if isinstance(request_id, str) else None
        self.retry_after = retry_after

    @property
    def detail(self) -> str:
        """The problem's `detail` (the same as `message`)."""
        return self.message

    def __str__(self) -> str:
        rid = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.code}: {self.message}{rid}"


class ApiValidationError(ApiError, ValidationError):
    """A 400, 413 or 422 answer: the request is malformed or refused by a rule; repeating it will not help."""


class ApiConflictError(ApiError, ConflictError):
    """A 409 answer (PREV_CHAIN_HASH_MISMATCH, IDEMPOTENCY_CONFLICT, a domain rule, …)."""


class ApiNotFoundError(ApiError, NotFoundError):
    """A 404 answer (JOB_NOT_FOUND, ARTIFACT_NOT_FOUND, …)."""


class ApiUnavailableError(ApiError):
    """A 429 or 5xx answer: the API or its database is busy or down; retry after `retry_after`."""


class ApiUnreachableError(SettlekitError):
    """No answer from the API: the connection was refused, dropped or timed out. A write may or may not have
    been committed; retry it with the same Idempotency-Key (the client does)."""

    code = "API_UNREACHABLE"
    status = 503


class SpoolError(SettlekitError):
    """The local spool refused: a stream stopped after a conflict, or a spool file that is not one."""

    code = "SPOOL_INVALID"
    status = 400


def error_from_response(status: int, body: bytes, headers: Mapping[str, str]) -> ApiError:
    """The typed error of an error answer; a body that is not problem+json still gives `HTTP_<status>`."""
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        parsed = {}
    problem: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    if "detail" not in problem and body and not problem:
        problem = {"detail": body[:200].decode("utf-8", "replace")}
    request_id = headers.get("x-request-id")
    if request_id and "requestId" not in problem:
        problem["requestId"] = request_id
    return _class_for(status)(status, problem, retry_after=retry_after_seconds(headers.get("retry-after")))


def _class_for(status: int) -> type[ApiError]:
    if status == 409:
        return ApiConflictError
    if status == 404:
        return ApiNotFoundError
    if status in (400, 413, 422):
        return ApiValidationError
    if status == 429 or status >= 500:
        return ApiUnavailableError
    return ApiError


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds (the API sends delta-seconds; an HTTP date is not used by it and is ignored)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
