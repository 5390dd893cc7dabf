"""`Client` and `AsyncClient`: the routes of `Operations` over httpx, with the API key, an Idempotency-Key on
every write (kept across retries), retries of transient failures (`RetryPolicy`) and typed errors."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from settlekit.client.errors import ApiUnreachableError, error_from_response
from settlekit.client.operations import UNSET, Json, Operations
from settlekit.client.retry import RetryPolicy
from settlekit.client.sse import ServerSentEvent, aparse, asse_lines, parse, sse_lines
from settlekit.errors import SettlekitError
from settlekit.events.canonical import parse_json_deep

_PARAM = re.compile(r"\{([a-z_]+)\}")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Prepared:
    """One request as it goes on the wire (the same bytes and Idempotency-Key on every retry)."""

    method: str
    path: str
    query: dict[str, Any]
    content: bytes | None
    headers: dict[str, str]


def prepare(route: str, body: Any, headers: Mapping[str, str] | None, idempotency_key: str | None,
            params: Mapping[str, Any]) -> Prepared:
    """The request of `route` ("METHOD /path/{name}") with `params`: the names in the path fill it (URL-quoted),
    the others are the query (None dropped). `body` is JSON (bytes are sent as they are)."""
    method, _, template = route.partition(" ")
    names = _PARAM.findall(template)
    missing = [n for n in names if params.get(n) is None]
    if missing:
        raise TypeError(f"{route}: path parameter {missing[0]} is required")
    path = _PARAM.sub(lambda m: quote(str(params[m.group(1)]), safe=""), template)
    query = {k: _query_value(v) for k, v in params.items() if k not in names and v is not None}
    out_headers = dict(headers or {})
    content = None
    if body is not UNSET:
        content = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False,
                                                                    separators=(",", ":")).encode("utf-8")
        out_headers["content-type"] = "application/json"
    if method in WRITE_METHODS:
        out_headers["idempotency-key"] = idempotency_key or f"idem_{uuid.uuid4().hex}"
    return Prepared(method, path, query, content, out_headers)


def _query_value(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


def decode(response: httpx.Response) -> Json:
    """The answer's data, or its typed error. JSON answers are decoded; others (metrics) come back as text. A
    redirect is not the API's answer (the client follows none: a proxy sent it), so it is ApiUnreachableError:
    the request may be retried unchanged once the URL is right."""
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.content, response.headers)
    if not 200 <= response.status_code < 300:
        raise ApiUnreachableError(f"the API's URL answered {response.status_code} (a redirect to "
                                  f"{response.headers.get('location', 'nowhere')!r}), not the API itself",
                                  answerStatus=response.status_code)
    if "json" in response.headers.get("content-type", ""):
        try:
            return response.json()
        except RecursionError:  # imported history may nest thousands of levels: read without recursion
            return parse_json_deep(response.text)
    return response.text


def _headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    headers = {"user-agent": user_agent, "accept": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


USER_AGENT = "settlekit-client/0.1"


class Client(Operations[Json, Iterator[ServerSentEvent]]):
    """The API over a synchronous httpx client. Give `base_url` and `api_key`, or a ready `http` client (its base
    URL and transport are used; the key is still added). Use as a context manager or `close()` it."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", api_key: str | None = None, *,
                 retry: RetryPolicy | None = None, timeout: float = DEFAULT_TIMEOUT,
                 http: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep):
        self.retry = retry or RetryPolicy()
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._auth = _headers(api_key, USER_AGENT)
        self._sleep = sleep

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _call(self, route: str, /, *, body: Any = UNSET, headers: Mapping[str, str] | None = None,
              idempotency_key: str | None = None, **params: Any) -> Json:
        return self.send(prepare(route, body, headers, idempotency_key, params))

    def send(self, request: Prepared, retry: RetryPolicy | None = None) -> Json:
        """Send `request`, retrying transient failures per `retry` (default: the client's policy)."""
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                return decode(self._once(request))
            except SettlekitError as exc:
                if not policy.should_retry(attempt, exc):
                    raise
                self._sleep(policy.delay(attempt, exc))

    def _stream(self, route: str, /, *, headers: Mapping[str, str] | None = None,
                **params: Any) -> Iterator[ServerSentEvent]:
        """The events of a Server-Sent Events route as they come, until the server ends the stream (no retry:
        resume by giving the last event's id back to the route)."""
        request = prepare(route, UNSET, {"accept": "text/event-stream", **(headers or {})}, None, params)
        try:
            with self._http.stream(request.method, request.path, params=request.query,
                                   headers={**self._auth, **request.headers}) as response:
                if response.status_code >= 400:
                    response.read()
                    decode(response)
                yield from parse(sse_lines(response.iter_text()))
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc

    def _once(self, request: Prepared) -> httpx.Response:
        try:
            return self._http.request(request.method, request.path, params=request.query, content=request.content,
                                      headers={**self._auth, **request.headers})
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


class AsyncClient(Operations[Awaitable[Json], AsyncIterator[ServerSentEvent]]):
    """The same routes over an asynchronous httpx client: every method returns an awaitable."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", api_key: str | None = None, *,
                 retry: RetryPolicy | None = None, timeout: float = DEFAULT_TIMEOUT,
                 http: httpx.AsyncClient | None = None):
        self.retry = retry or RetryPolicy()
        self._own = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._auth = _headers(api_key, USER_AGENT)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    def _call(self, route: str, /, *, body: Any = UNSET, headers: Mapping[str, str] | None = None,
              idempotency_key: str | None = None, **params: Any) -> Awaitable[Json]:
        return self.send(prepare(route, body, headers, idempotency_key, params))

    async def send(self, request: Prepared, retry: RetryPolicy | None = None) -> Json:
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                return decode(await self._once(request))
            except SettlekitError as exc:
                if not policy.should_retry(attempt, exc):
                    raise
                await anyio.sleep(policy.delay(attempt, exc))

    async def _stream(self, route: str, /, *, headers: Mapping[str, str] | None = None,
                      **params: Any) -> AsyncIterator[ServerSentEvent]:
        request = prepare(route, UNSET, {"accept": "text/event-stream", **(headers or {})}, None, params)
        try:
            async with self._http.stream(request.method, request.path, params=request.query,
                                         headers={**self._auth, **request.headers}) as response:
                if response.status_code >= 400:
                    await response.aread()
                    decode(response)
                async for event in aparse(asse_lines(response.aiter_text())):
                    yield event
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc

    async def _once(self, request: Prepared) -> httpx.Response:
        try:
            return await self._http.request(request.method, request.path, params=request.query,
                                            content=request.content, headers={**self._auth, **request.headers})
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


def _unreachable(request: Prepared, exc: httpx.TransportError) -> ApiUnreachableError:
    return ApiUnreachableError(f"{request.method} {request.path}: {type(exc).__name__}: {exc}",
                               method=request.method, path=request.path)
