"""The API's one middleware, pure ASGI: what every request goes through before a route, in this order.

1. A request id (the client's `X-Request-Id` or a new one), bound to every log line and echoed in the answer.
2. The request head: U+0000 in the path, query or a header is 400 INPUT_INVALID.
3. Outside the open paths, the append route and the event streams, at most `max_routed_requests` requests are in
   progress; one more, for a path a route serves, is 503 OVERLOADED at once, before authentication, so a stalled
   database or a flood cannot pile up requests waiting for the threads routes run on. A request counts from its
   arrival until its answer starts, except while its body is received: slow clients do not take from the bound.
   Authentication outside the open paths (a refused request for a path no route serves is 404), the key's rate
   limit; answers to an authenticated request carry its RateLimit-* headers. A mounted sub-application that
   authenticates its own requests (the console's session cookie) is held to the same bound, not authenticated
   here. While the database is known to be unreachable, 503 DATABASE_UNAVAILABLE at once, before any thread waits
   on it.
4. The raw body of a write, up to the limit (413 PAYLOAD_TOO_LARGE beyond, Content-Length checked first); a JSON
   body's strings must be storable (400 SCHEMA_INVALID).

Afterwards: one log line per request (request_log) and the request counter and duration histogram; a request whose
connection ended during its body (the client left, or uvicorn refused its framing with a 400 of its own) counts as
status 499, not as a server error. One layer
and one `send` wrapper instead of a stack of five: each layer costs a call chain and a closure per request.

A direct route (`DirectRoute`: the event append, the hot path) is served here without FastAPI's routing and
dependency resolution: ONE trip to a worker thread authenticates the request and reads what the route needs with
the key; the body check and the handler then run on the event loop (the append waits for its group commit there,
without holding a thread). Those threads hold a bounded number of requests (`ApiContext.auth_threads`): one
more is 503 OVERLOADED at once. The checks come in the same order and give the same answers as on the routed path; a
body without Content-Length or over the limit takes the routed path.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit.api.auth import ApiKey
from settlekit.api.deps import ApiContext, authenticate_with_quota, bearer_token
from settlekit.api.guards import InputError, check_json_body, check_request_head
from settlekit.api.problems import error_headers, no_route_problem, problem_from_error, problem_response
from settlekit.api.ratelimit import Quota
from settlekit.api.request_log import HEADER, MAX_PROBLEM_BYTES, error_code, log_request, request_id_from
from settlekit.application.jobs import CachedStreamStale
from settlekit.application.keys import StoredApiKey
from settlekit.errors import OverloadedError, SettlekitError
from settlekit.metrics import PerRegistry
from settlekit.runtime import logging as logs

_REQUEST_ID = HEADER.encode()
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})
_CONVERTER = re.compile(r"\{(\w+):\w+\}")  # `{verb:str}` of a route's path, named `{verb}` in labels
# the status logged and counted for a request that got no answer because its connection ended during its body
# (nginx's code for it; never sent)
CLIENT_CLOSED_REQUEST = 499


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("settlekit_api_requests", "API requests by method, route and status",
                                ["method", "route", "status"], registry=registry)
        self.duration = Histogram("settlekit_api_request_duration_seconds", "API request duration by route",
                                  ["method", "route"], registry=registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        cached = Counter("settlekit_append_cache", "Appends by what this process's caches gave them: hit (the key "
                         "and the job known, nothing read before the commit), miss (read), stale (the cached guess "
                         "failed at the commit or the checks: served again from a read)", ["result"],
                         registry=registry)
        self.append_cache = {result: cached.labels(result) for result in ("hit", "miss", "stale")}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count and time one request (the labelled children are looked up once per combination)."""
        label = (method, route, str(status))
        children = self._children.get(label)
        if children is None:
            children = (self.requests.labels(*label), self.duration.labels(method, route))
            self._children[label] = children
        children[0].inc()
        children[1].observe(seconds)


metrics_for: PerRegistry[ApiMetrics] = PerRegistry(ApiMetrics)


# The work of a direct route once the request is authenticated, on the event loop: (ctx, request, key, body, what
# its prefetch read, or None). It must not block the loop: it awaits what waits on the database.
DirectHandler = Callable[[ApiContext, Request, ApiKey, bytes, Any], Awaitable[Response]]
# What a direct route reads together with the presented API key's row, in one round trip: (ctx, request, key id,
# body) -> (the key's row or None, what the handler gets). It must not raise for a bad body (the handler does).
DirectPrefetch = Callable[[ApiContext, Request, str, bytes], tuple[StoredApiKey | None, Any]]
# What the prefetch would read, from this process's caches, for a key whose row is known (api.auth.KnownKeys):
# (ctx, request, the key's row, body) -> what the handler gets, or None (not cached: the prefetch reads it). The
# handler raises CachedStreamStale when what it got proved stale: the request is then served again from a read.
DirectCached = Callable[[ApiContext, Request, StoredApiKey, bytes], Any]


@dataclass(frozen=True)
class DirectRoute:
    """A route the middleware serves itself: `route` (its APIRoute, for matching, the path parameters and the
    metrics label), `handler`, `prefetch` when the route reads something with the key, and `cached` when that
    read may come from this process's caches."""

    route: BaseRoute
    handler: DirectHandler
    prefetch: DirectPrefetch | None = None
    cached: DirectCached | None = None


class _Exchange:
    """What the middleware learns about one request while it runs."""

    __slots__ = ("client_left", "extra_headers", "problem", "request_id", "status")

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.status = 500
        self.client_left = False  # the body's receive ended in a disconnect, before any answer
        self.problem: bytearray | None = None
        self.extra_headers: list[tuple[bytes, bytes]] = []


class ApiMiddleware:
    """See the module docstring. `routed(scope)`: whether a route serves the request's path (any method)."""

    def __init__(self, app: ASGIApp, ctx: ApiContext, *, open_paths: frozenset[str], open_prefixes: tuple[str, ...],
                 routed: Callable[[Scope], bool], max_body_bytes: int, direct: Sequence[DirectRoute] = (),
                 max_routed_requests: int = 256, unbounded_paths: frozenset[str] = frozenset(),
                 session_prefixes: tuple[str, ...] = ()):
        self.app = app
        # mounted sub-applications that authenticate their own requests (the console's session cookie)
        self.session_prefixes = tuple(f"{p}/" for p in session_prefixes)
        self.session_roots = frozenset(session_prefixes)  # `/console` itself: a redirect to `/console/`
        self.max_routed_requests = max_routed_requests
        self.unbounded_paths = unbounded_paths
        self.routed_in_progress = 0  # requests holding a _Slot (changed on the event loop only)
        self.direct = tuple(direct)
        self.ctx = ctx
        self.open_paths = open_paths
        self.open_prefixes = open_prefixes
        self.routed = routed
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics_for(ctx.registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(request_id_from(scope))
        logs.clear()
        logs.bind(request_id=exchange.request_id)
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = _start_message(message, exchange)
            elif exchange.problem is not None and len(exchange.problem) < MAX_PROBLEM_BYTES:
                exchange.problem.extend(message.get("body", b""))
            await send(message)

        failed = False
        try:
            await self._handle(scope, receive, send_wrapper, exchange)
        except Exception:
            failed = True
            raise
        finally:
            self._finish(scope, exchange, started, failed)

    def _finish(self, scope: Scope, exchange: _Exchange, started: float, failed: bool) -> None:
        seconds = time.perf_counter() - started
        route = self._route_label(scope)
        if failed:
            status = 500
        elif exchange.client_left:
            # no answer: the client left during its body, or uvicorn refused its framing (a bad chunk size, an
            # unknown Transfer-Encoding) with its own 400 and closed; either way not a server error
            status = CLIENT_CLOSED_REQUEST
        else:
            status = exchange.status
        self.metrics.observe(scope["method"], route or "unmatched", status, seconds)
        code = "INTERNAL" if failed else error_code(exchange.problem)
        log_request(scope, exchange.request_id, status, seconds, route, code)

    def _route_label(self, scope: Scope) -> str | None:
        """The path template of the route that served the request (None: none did). A mounted sub-application's
        route is named by its full template (`/console/destination/{verb}`, `/console/static/{path}`): a fixed set
        the routes define, never the text of a request's path."""
        route = scope.get("route")
        template: str | None = getattr(route, "path", None)
        path: str = scope["path"]
        if template is None or not (path in self.session_roots or path.startswith(self.session_prefixes)):
            return None if template is None else _CONVERTER.sub(r"{\1}", template)  # /v1/deliveries/{delivery_id}
        root = next(r for r in self.session_roots if path == r or path.startswith(f"{r}/"))
        if template == root:  # the mount itself: no route of the sub-application matched
            return None
        full = root + _CONVERTER.sub(r"{\1}", template)
        return f"{full}/{{path}}" if isinstance(route, Mount) else full

    async def _handle(self, scope: Scope, receive: Receive, send: Send, exchange: _Exchange) -> None:
        try:
            check_request_head(scope)
        except InputError as exc:
            await problem_from_error(exc)(scope, receive, send)
            return
        path: str = scope["path"]
        if path in self.open_paths or path.startswith(self.open_prefixes):
            await self.app(scope, receive, send)
            return
        if self.session_prefixes and (path.startswith(self.session_prefixes) or path in self.session_roots):
            await self._serve_session(scope, receive, send)
            return
        if self.direct and await self._serve_direct(scope, receive, send, exchange):
            return
        slot = _Slot(self, bounded=path not in self.unbounded_paths)
        try:
            if not slot.take() and self.routed(scope):
                await self._overloaded(scope, receive, send)
                return
            await self._serve_routed(scope, receive, send, exchange, slot)
        finally:
            slot.release()

    async def _serve_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request to a sub-application that authenticates it itself: within the bound of routed requests."""
        slot = _Slot(self, bounded=True)
        try:
            if not slot.take():
                await self._overloaded(scope, receive, send)
                return
            await self.app(scope, receive, slot.released_on_answer(send))
        finally:
            slot.release()

    async def _overloaded(self, scope: Scope, receive: Receive, send: Send) -> None:
        overloaded = OverloadedError(f"{self.routed_in_progress} requests are already in progress in this process",
                                     limit=self.max_routed_requests)
        await problem_from_error(overloaded, error_headers(overloaded))(scope, receive, send)

    async def _serve_routed(self, scope: Scope, receive: Receive, send: Send, exchange: _Exchange,
                            slot: _Slot) -> None:
        """Authenticate, read the body of a write, and hand the request to its route. The request holds its `slot`
        until its answer starts, except while its body is received."""
        if not await self._authenticate(scope, receive, send, exchange):
            return
        if scope["method"] in _BODYLESS:
            await self.app(scope, receive, slot.released_on_answer(send))
            return
        slot.release()
        body = await self._read_body(scope, receive, send, exchange)
        if body is None:
            return
        if not slot.take():
            await self._overloaded(scope, receive, send)
            return
        send = slot.released_on_answer(send)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _authenticate(self, scope: Scope, receive: Receive, send: Send, exchange: _Exchange) -> bool:
        """The request's key in scope["state"]["api_key"] (True), or the refusal sent (False)."""
        try:
            self.ctx.db.check_reachable()
            client = scope.get("client")
            key, quota = await run_in_threadpool(authenticate_with_quota, self.ctx, Headers(scope=scope),
                                                 client[0] if client else None)
        except SettlekitError as exc:
            if not self.routed(scope):
                await no_route_problem(scope["method"], scope["path"])(scope, receive, send)
            else:
                await problem_from_error(exc, error_headers(exc))(scope, receive, send)
            return False
        scope.setdefault("state", {})["api_key"] = key
        logs.bind(tenant=key.tenant_id, key_id=key.key_id)
        if quota is not None:
            exchange.extra_headers = quota.headers()
        return True

    async def _serve_direct(self, scope: Scope, receive: Receive, send: Send, exchange: _Exchange) -> bool:
        """Serve a direct route's request (True), or leave it to the routed path (False: no direct route matches,
        or the body has no Content-Length or one over the limit, answered there)."""
        found = self._direct_match(scope)
        if found is None:
            return False
        direct, child_scope = found
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if not declared.isdigit() or int(declared) > self.max_body_bytes:
            return False
        body = await _read_whole(receive)
        if body is None:
            exchange.client_left = True
            return True
        scope.update(child_scope)
        request = Request(scope, receive)
        client = scope.get("client")
        address = client[0] if client else None
        try:
            self.ctx.db.check_reachable()
            answer, spent = await self._serve_from_caches(direct, request, body, address, exchange)
            if answer is not None:
                await answer(scope, receive, send)
                return True
            # refused at once (OverloadedError) when the auth threads hold as many requests as they take
            authenticating = self.ctx.auth_threads.run(
                contextvars.copy_context().run, self._direct_authenticate, direct, request, body, address, not spent)
        except SettlekitError as exc:
            await problem_from_error(exc, error_headers(exc))(scope, receive, send)
            return True
        answer, key, quota, prefetched = await authenticating
        if quota is not None:
            exchange.extra_headers = quota.headers()
        if answer is None:
            assert key is not None
            answer = await self._handle_direct(direct, request, key, body, prefetched)
        await answer(scope, receive, send)
        return True

    async def _handle_direct(self, direct: DirectRoute, request: Request, key: ApiKey, body: bytes,
                             prefetched: Any) -> Response:
        """The direct route's answer for an authenticated request: its handler's, or its refusal (problem+json).
        CachedStreamStale goes through to the caller."""
        logs.bind(tenant=key.tenant_id, key_id=key.key_id)
        try:
            check_json_body(body)
            return await direct.handler(self.ctx, request, key, body, prefetched)
        except SettlekitError as exc:
            return problem_from_error(exc, error_headers(exc))

    def _direct_match(self, scope: Scope) -> tuple[DirectRoute, Scope] | None:
        for direct in self.direct:
            match, child_scope = direct.route.matches(scope)
            if match is Match.FULL:
                return direct, child_scope
        return None

    async def _serve_from_caches(self, direct: DirectRoute, request: Request, body: bytes, client: str | None,
                                 exchange: _Exchange) -> tuple[Response | None, bool]:
        """Serve a request whose key and prefetch this process's caches hold, on the loop without a read: (the
        answer, True). (None, whether the request took its rate-limit token) when they do not hold them, or when
        what they held proved stale (the key is forgotten then): the caller serves it from a read."""
        if direct.cached is None:
            return None, False
        token = bearer_token(request.headers)
        stored = self.ctx.known_keys.get(token) if token is not None else None
        prefetched = direct.cached(self.ctx, request, stored, body) if stored is not None else None
        if token is None or prefetched is None:
            self.metrics.append_cache["miss"].inc()
            return None, False
        try:
            key, quota = authenticate_with_quota(self.ctx, request.headers, client, lambda _key_id: stored)
        except SettlekitError as exc:  # the rate limits: answered from the caches too
            self.metrics.append_cache["hit"].inc()
            return problem_from_error(exc, error_headers(exc)), True
        if quota is not None:
            exchange.extra_headers = quota.headers()
        request.scope.setdefault("state", {})["api_key"] = key
        try:
            answer = await self._handle_direct(direct, request, key, body, prefetched)
        except CachedStreamStale:
            self.metrics.append_cache["stale"].inc()
            self.ctx.known_keys.discard(token)
            return None, True
        self.metrics.append_cache["hit"].inc()
        return answer, True

    def _direct_authenticate(self, direct: DirectRoute, request: Request, body: bytes, client: str | None,
                             spend: bool = True) -> tuple[Response | None, ApiKey | None, Quota | None, Any]:
        """On a worker thread: authenticate, reading the route's prefetch with the key. Returns (None, the key, its
        quota, what the prefetch read), or (the refusal's problem answer, None, None, None). `spend=False`: the
        request already took its rate-limit token. A key that authenticated is known to the route's cached path
        from then on (`ctx.known_keys`)."""
        prefetched: list[Any] = [None]
        found: list[StoredApiKey | None] = [None]
        lookup = None
        if direct.prefetch is not None:
            prefetch = direct.prefetch

            def lookup(key_id: str) -> StoredApiKey | None:
                found[0], prefetched[0] = prefetch(self.ctx, request, key_id, body)
                return found[0]

        try:
            key, quota = authenticate_with_quota(self.ctx, request.headers, client, lookup, spend=spend)
        except SettlekitError as exc:
            return problem_from_error(exc, error_headers(exc)), None, None, None
        token = bearer_token(request.headers)
        if direct.cached is not None and found[0] is not None and token is not None:
            self.ctx.known_keys.add(token, found[0])
        request.scope.setdefault("state", {})["api_key"] = key
        return None, key, quota, prefetched[0]

    async def _read_body(self, scope: Scope, receive: Receive, send: Send, exchange: _Exchange) -> bytes | None:
        """The whole raw body within the limit, or None once a refusal (413, 400) was sent (or the client left:
        `exchange.client_left`)."""
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = int(value) if value.isdigit() else 0
                if declared > limit:
                    await self._too_large(scope, receive, send, declared)
                    return None
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                exchange.client_left = True
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, size)
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            check_json_body(body)
        except SettlekitError as exc:
            await problem_from_error(exc)(scope, receive, send)
            return None
        return body

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        response = problem_response(413, "PAYLOAD_TOO_LARGE",
                                    f"request body is over the limit of {self.max_body_bytes} bytes",
                                    limitBytes=self.max_body_bytes, sizeBytes=size)
        await response(scope, receive, send)


class _Slot:
    """A routed request's place in the process's bound (`ApiMiddleware.max_routed_requests`): taken at once or
    refused, given back when the request stops holding it. An unbounded one is always taken."""

    __slots__ = ("bounded", "held", "owner")

    def __init__(self, owner: ApiMiddleware, *, bounded: bool):
        self.owner = owner
        self.bounded = bounded
        self.held = False

    def take(self) -> bool:
        if not self.bounded or self.held:
            return True
        if self.owner.routed_in_progress >= self.owner.max_routed_requests:
            return False
        self.owner.routed_in_progress += 1
        self.held = True
        return True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.owner.routed_in_progress -= 1

    def released_on_answer(self, send: Send) -> Send:
        """`send`, giving the slot back when the answer starts (a slow reader holds no place)."""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.release()
            await send(message)

        return sending


async def _read_whole(receive: Receive) -> bytes | None:
    """The request body (its size bounded by the Content-Length the server enforces); None if the client left."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _start_message(message: Message, exchange: _Exchange) -> Message:
    """The response head with the request id (replacing any other) and the rate-limit headers; notes the status and
    whether the body is a problem (kept for the log line's error code)."""
    exchange.status = int(message["status"])
    headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _REQUEST_ID]
    headers.extend(exchange.extra_headers)
    headers.append((_REQUEST_ID, exchange.request_id.encode("latin-1")))
    for name, value in headers:
        if name.lower() == b"content-type":
            if value.startswith(b"application/problem+json"):
                exchange.problem = bytearray()
            break
    return {**message, "headers": headers}
