"""One log line per API request, and a request id on every line logged while it runs (api.middleware calls these).

The id comes from the client's `X-Request-Id` (1..128 visible ASCII characters) or is generated; it is echoed in
the response's `X-Request-Id` header. The request's line (`event: "request"`) carries method, path, route,
status, duration, the tenant and key id of the authenticated key, and the problem `code` of an error answer.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from starlette.types import Scope

from settlekit.events.randomness import random_uuid
from settlekit.runtime.logging import write_json_line

log = logging.getLogger("settlekit.api.request")

HEADER = "x-request-id"
_VALID_ID = re.compile(r"[!-~]{1,128}")
MAX_PROBLEM_BYTES = 65_536  # of a problem body, read for the log line's error code
_HEADER_BYTES = HEADER.encode()


def request_id_from(scope: Scope) -> str:
    """The client's request id when it is well formed, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == _HEADER_BYTES:
            text = value.decode("latin-1")
            if _VALID_ID.fullmatch(text):
                return text
            break
    return random_uuid().hex


def error_code(problem: bytearray | None) -> str | None:
    """The `code` of a problem body (None when there is none or it is not one)."""
    if problem is None:
        return None
    try:
        code = orjson.loads(problem).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) else None


def log_request(scope: Scope, request_id: str, status: int, seconds: float, route: str | None,
                error: str | None) -> None:
    """The request's log line (ERROR for a 5xx answer)."""
    level = logging.ERROR if status >= 500 else logging.INFO
    if not log.isEnabledFor(level):
        return
    key: Any = scope.get("state", {}).get("api_key")
    fields = {
        "request_id": request_id,
        "method": scope["method"],
        "path": scope["path"],
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 3),
        "tenant": getattr(key, "tenant_id", None),
        "key_id": getattr(key, "key_id", None),
        "error_code": error,
    }
    extra = {k: v for k, v in fields.items() if v is not None}
    if not write_json_line(log, level, "request", extra):
        log.log(level, "request", extra=extra)
