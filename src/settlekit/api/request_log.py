"""One log line per API request, and a request id on every line logged while it runs.

The id comes from the client's `X-Request-Id` (1..128 visible ASCII characters) or is generated; it is echoed in
the response's `X-Request-Id` header. The request's line (`event: "request"`) carries method, path, route,
status, duration, the tenant and key id of the authenticated key, and the problem `code` of an error answer.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit.runtime import logging as logs

log = logging.getLogger("settlekit.api.request")

HEADER = "x-request-id"
_VALID_ID = re.compile(r"[!-~]{1,128}")
_MAX_PROBLEM_BYTES = 65_536


def request_id_from(scope: Scope) -> str:
    """The client's request id when it is well formed, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == HEADER.encode():
            text = value.decode("latin-1")
            if _VALID_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


def _error_code(body: bytes) -> str | None:
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) else None


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope)
        logs.clear()
        logs.bind(request_id=request_id)
        started = time.perf_counter()
        status = 500
        problem: bytearray | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status, problem
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER.encode()]
                headers.append((HEADER.encode(), request_id.encode("latin-1")))
                message = {**message, "headers": headers}
                content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if content_type.startswith(b"application/problem+json"):
                    problem = bytearray()
            elif message["type"] == "http.response.body" and problem is not None and len(problem) < _MAX_PROBLEM_BYTES:
                problem.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            self._log(scope, request_id, 500, started, "INTERNAL")
            raise
        self._log(scope, request_id, status, started, _error_code(bytes(problem)) if problem is not None else None)

    @staticmethod
    def _log(scope: Scope, request_id: str, status: int, started: float, error_code: str | None) -> None:
        key: Any = scope.get("state", {}).get("api_key")
        route = scope.get("route")
        fields = {
            "request_id": request_id,
            "method": scope["method"],
            "path": scope["path"],
            "route": getattr(route, "path", None),
            "status": status,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "tenant": getattr(key, "tenant_id", None),
            "key_id": getattr(key, "key_id", None),
            "error_code": error_code,
        }
        level = logging.ERROR if status >= 500 else logging.INFO
        log.log(level, "request", extra={k: v for k, v in fields.items() if v is not None})
