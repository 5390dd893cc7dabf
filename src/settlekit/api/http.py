"""HTTP plumbing: JSON rendering, RFC 9457 problem responses and handlers, the raw body size limit and the
per-key token bucket."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit import logs
from settlekit.errors import SettlekitError, ValidationError
from settlekit.events.canonical import js_int

log = logging.getLogger("settlekit.api")
PROBLEM_TYPE = "application/problem+json"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(raw: bytes) -> Any:
    """A request body parsed like JavaScript JSON.parse (unsafe integers become doubles; NaN/Infinity refused).
    Strings holding U+0000 or a lone surrogate are refused (INPUT_INVALID), as everywhere in a request."""
    try:
        value = json.loads(raw, parse_int=js_int, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SettlekitError("the request body is not valid JSON", code="JSON_INVALID", status=400) from exc
    if _SUSPECT_ESCAPE.search(raw):
        check_json_strings(value)
    return value


# --- input guard ---------------------------------------------------------------------------------------------
# Every string a request brings (path, query, headers, JSON body) must be storable text on both backends:
# PostgreSQL refuses U+0000 in text and JSON, and a lone surrogate cannot be encoded as UTF-8.

# A JSON escape that can produce U+0000 or a surrogate: the body is walked only when one is present.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


class InputError(SettlekitError):
    """U+0000 in a request's path, query or headers (a JSON body's strings answer SCHEMA_INVALID instead)."""

    code = "INPUT_INVALID"
    status = 400


def check_text(value: str, field: str) -> str:
    """`value` unless it holds U+0000 or a lone surrogate (InputError naming `field`)."""
    if "\x00" in value:
        raise InputError(f"{field} must not contain U+0000", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{field} must not contain a lone surrogate", field=field) from None
    return value


def _check_json_string(value: str, path: str) -> None:
    if "\x00" in value:
        raise ValidationError(f"U+0000 in string at {path}", code="SCHEMA_INVALID", path=path)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"lone surrogate in string at {path}", code="SCHEMA_INVALID", path=path) from None


def check_json_strings(value: Any, path: str = "$") -> None:
    """Every key and string of a parsed JSON body is text both backends store: no U+0000, no lone surrogate
    (SCHEMA_INVALID naming the JSON path, as the append path words it). Iterative: depth is no concern."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_json_string(item, where)
        elif isinstance(item, dict):
            for k, v in item.items():
                _check_json_string(k, f"{where}.<key>")
                stack.append((v, f"{where}.{k}"))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))


def check_request_head(scope: Scope) -> None:
    """Path, query string and header values of a request: no U+0000 (percent-encoded or not)."""
    if "\x00" in scope.get("path", ""):
        raise InputError("the path must not contain U+0000", field="path")
    query: bytes = scope.get("query_string", b"")
    if b"\x00" in query or b"%00" in query:
        raise InputError("the query string must not contain U+0000", field="query")
    for name, value in scope.get("headers", ()):
        if b"\x00" in value:
            raise InputError("a header must not contain U+0000", field=name.decode("latin-1"))


class InputGuardMiddleware:
    """Refuses a request whose path, query or headers hold U+0000 (400 INPUT_INVALID) before it reaches
    authentication or a route; JSON bodies are checked where they are read (BodyLimitMiddleware, parse_body:
    400 SCHEMA_INVALID with the JSON path)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                check_request_head(scope)
            except InputError as exc:
                await problem_from_error(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_json_body(body: bytes) -> None:
    """A JSON request body whose strings hold U+0000 or a lone surrogate: SCHEMA_INVALID. Bodies that are not JSON
    are left to the route's parser (which answers JSON_INVALID)."""
    if not _SUSPECT_ESCAPE.search(body):
        return
    try:
        value = json.loads(body, parse_int=_ignore, parse_float=_ignore, parse_constant=_ignore)
    except (ValueError, RecursionError):
        return
    check_json_strings(value)


def _ignore(text: str) -> None:
    return None


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class JsonResponse(Response):
    """JSON without FastAPI's encoder pass: event payloads are rendered exactly as parsed."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]")


def content_disposition(filename: str) -> str:
    """An RFC 6266 attachment header: a quoted ASCII fallback with every other character replaced, and the
    exact name as an RFC 8187 `filename*` (percent-encoded UTF-8), so no name can inject parameters."""
    fallback = _UNSAFE_FILENAME.sub("_", filename).lstrip(".") or "download"
    encoded = quote(filename.encode("utf-8", "surrogatepass"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


def problem_response(status: int, code: str, detail: str, **details: Any) -> Response:
    exc = SettlekitError(detail, code=code, status=status, **details)
    return problem_from_error(exc, error_headers(exc))


def problem_from_error(exc: SettlekitError, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(exc.to_problem()), status_code=exc.status, media_type=PROBLEM_TYPE, headers=headers)


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
        return {"Retry-After": str(retry)}
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
        detail = f"no route for {request.method} {request.url.path}"
    response = problem_response(exc.status_code, code, detail)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def unhandled_error_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    response = problem_response(500, "INTERNAL", "internal server error")
    request_id = logs.current("request_id")  # this answer leaves outside the request-log middleware
    if isinstance(request_id, str):
        response.headers["x-request-id"] = request_id
    return response


class BodyLimitMiddleware:
    """Reads the raw request body (up to the limit) before any parsing; larger bodies get 413
    PAYLOAD_TOO_LARGE without reaching a route. Content-Length is checked first when present."""

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await self._too_large(scope, receive, send, declared)
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, size)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            check_json_body(body)
        except SettlekitError as exc:
            await problem_from_error(exc)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        response = problem_response(413, "PAYLOAD_TOO_LARGE",
                                    f"request body is over the limit of {self.max_body_bytes} bytes",
                                    limitBytes=self.max_body_bytes, sizeBytes=size)
        await response(scope, receive, send)


class RateLimiter:
    """In-process token bucket per key (an API key id, a client address): `rate` tokens per second, at most
    `burst` saved. At most `max_entries` buckets are kept (least recently used dropped first): memory is bounded
    whatever the number of keys or addresses seen."""

    def __init__(self, rate: float, burst: int, clock: Any = time.monotonic, max_entries: int = 100_000):
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self.clock = clock
        self.max_entries = max(1, int(max_entries))
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - last) * self.rate)

    def _put(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_entries:
            self._buckets.popitem(last=False)

    def take(self, key: str) -> float:
        """0.0 when a request may go ahead, else the seconds until a token is available."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens = self._tokens(key, now)
            if tokens >= 1.0:
                self._put(key, tokens - 1.0, now)
                return 0.0
            self._put(key, tokens, now)
            return (1.0 - tokens) / self.rate

    def peek(self, key: str) -> float:
        """Like `take` without spending a token."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            tokens = self._tokens(key, self.clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
