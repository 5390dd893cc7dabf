"""Errors as RFC 9457 problem+json: a `SettlekitError` keeps its status and stable `code`; request validation,
HTTP errors and unhandled exceptions are mapped to codes too, and a stack trace is never returned. Every body
carries the request's `requestId` (the `X-Request-Id` of the answer)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from settlekit.api.ratelimit import RateLimitedError
from settlekit.api.responses import dumps
from settlekit.errors import SettlekitError
from settlekit.runtime import logging as logs

log = logging.getLogger("settlekit.api")
PROBLEM_TYPE = "application/problem+json"


def problem_response(status: int, code: str, detail: str, **details: Any) -> Response:
    exc = SettlekitError(detail, code=code, status=status, **details)
    return problem_from_error(exc, error_headers(exc))


def problem_from_error(exc: SettlekitError, headers: dict[str, str] | None = None) -> Response:
    body = exc.to_problem()
    request_id = logs.current("request_id")  # bound by the request-log middleware
    if isinstance(request_id, str):
        body["requestId"] = request_id
    return Response(dumps(body), status_code=exc.status, media_type=PROBLEM_TYPE, headers=headers)


def no_route_problem(method: str, path: str) -> Response:
    """404 NOT_FOUND for a path no route serves."""
    return problem_response(404, "NOT_FOUND", f"no route for {method} {path}")


_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 401: "UNAUTHENTICATED", 403: "FORBIDDEN",
               413: "PAYLOAD_TOO_LARGE", 415: "UNSUPPORTED_MEDIA_TYPE"}


def _loc_path(loc: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def error_headers(exc: SettlekitError) -> dict[str, str] | None:
    retry = exc.details.get("retryAfterSeconds")
    if retry is not None:
        headers = {"Retry-After": str(retry)}
        if isinstance(exc, RateLimitedError):
            headers.update((name.decode(), value.decode()) for name, value in exc.quota.headers())
        return headers
    if exc.status == 401:
        return {"WWW-Authenticate": "Bearer"}
    return None


async def settlekit_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SettlekitError)
    return problem_from_error(exc, error_headers(exc))


async def validation_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [{"path": _loc_path(e.get("loc", ())), "message": str(e.get("msg", "")), "type": str(e.get("type", ""))}
              for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        return problem_response(400, "JSON_INVALID", "the request body is not valid JSON", errors=errors)
    first = errors[0] if errors else {"path": "", "message": "invalid request"}
    return problem_response(400, "SCHEMA_INVALID", f"{first['path']}: {first['message']}", field=first["path"],
                            errors=errors)


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"HTTP_{exc.status_code}")
    detail = exc.detail if isinstance(exc.detail, str) else code
    if exc.status_code == 400 and detail.startswith("There was an error parsing the body"):
        # FastAPI's parse failure of a model body (too deep, not UTF-8, too many digits): as parse_body says it
        code, detail = "JSON_INVALID", "the request body is not valid JSON"
    if exc.status_code == 404 and detail == "Not Found":
        response = no_route_problem(request.method, request.url.path)
    else:
        response = problem_response(exc.status_code, code, detail)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    if exc.status_code == 405:
        response.headers["Allow"] = allowed_methods(request)
    return response


def allowed_methods(request: Request) -> str:
    """The `Allow` header of a 405: every method of every route serving the path (Starlette's names only the
    methods of the first route that matched the path, e.g. GET where PATCH is served too)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def unhandled_error_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    response = problem_response(500, "INTERNAL", "internal server error")
    request_id = logs.current("request_id")  # this answer leaves outside the request-log middleware
    if isinstance(request_id, str):
        response.headers["x-request-id"] = request_id
    return response

