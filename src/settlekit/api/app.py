"""The HTTP API: `create_app(db_url or Database, settings, server_signer=...)`.

Every route except /healthz, /readyz, /openapi.json and the documentation (/docs, /redoc) needs an API key
(`Authorization: Bearer sk_…`), is scoped to the key's tenant and rate-limited per key (RateLimit-* headers); a
path no route serves answers 404 with or without a key. Errors are RFC 9457 problem+json bodies with a stable
`code` and the `requestId`; stack traces are never returned.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit.api.deps import ApiContext, AuthMiddleware
from settlekit.api.docs import ASSETS_PATH, DOC_PATHS, add_docs
from settlekit.api.feed import FeedStreams
from settlekit.api.guards import BodyLimitMiddleware, InputGuardMiddleware
from settlekit.api.problems import (
    http_error_handler,
    settlekit_error_handler,
    unhandled_error_handler,
    validation_error_handler,
)
from settlekit.api.ratelimit import RateLimiter
from settlekit.api.request_log import RequestLogMiddleware
from settlekit.api.routes import ROUTERS
from settlekit.api.routes.jobs import append_metrics_for
from settlekit.append import job_appender
from settlekit.delivery.service import DestinationPolicy
from settlekit.dispatch.feed import FeedReader
from settlekit.errors import SettlekitError
from settlekit.events.envelope import Signer
from settlekit.metrics import PerRegistry
from settlekit.runtime.settings import Settings
from settlekit.store.artifacts import ArtifactStore
from settlekit.store.db import Database, connect

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", *DOC_PATHS})
OPEN_PREFIXES = (f"{ASSETS_PATH}/",)


class _ApiMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("settlekit_api_requests", "API requests by method, route and status",
                                ["method", "route", "status"], registry=registry)
        self.duration = Histogram("settlekit_api_request_duration_seconds", "API request duration by route",
                                  ["method", "route"], registry=registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


_metrics_for: PerRegistry[_ApiMetrics] = PerRegistry(_ApiMetrics)


class _MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: _ApiMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], path, str(status)).inc()
            self.metrics.duration.labels(scope["method"], path).observe(time.perf_counter() - started)


def create_app(
    db: str | Database,
    settings: Settings | None = None,
    *,
    server_signer: Signer | None,
    destination_policy: DestinationPolicy | None = None,
    registered_consumers: Sequence[str] | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the API on a Database (or a URL, opened, migrated and closed with the app) with `settings` (default:
    `Settings()`, from the environment): body limit, rate limits, operator tenant and the webhook network policy.
    The live objects are given as they are: `destination_policy` (default: from the settings),
    `registered_consumers`, the metrics `registry` (default: the global one). Destination secrets given by value
    are stored per tenant in the database. Consumer verbs need an `admin` key of the operator tenant.
    """
    settings = settings if settings is not None else Settings()
    owned = isinstance(db, str)
    database = connect(db) if isinstance(db, str) else db
    if owned:
        database.migrate()
    policy = destination_policy or _destination_policy(settings)
    ctx = ApiContext(
        db=database,
        store=job_appender(database, server_signer=server_signer),
        limiter=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        auth_failures=RateLimiter(settings.auth_failure_rate_per_second, settings.auth_failure_burst,
                                  max_entries=50_000),
        artifacts=ArtifactStore(),
        destination_policy=policy,
        operator_tenant=settings.operator_tenant,
        registered_consumers=registered_consumers,
        registry=registry if registry is not None else REGISTRY,
        feed=FeedStreams(FeedReader(database), max_per_tenant=settings.feed_max_streams_per_tenant,
                         poll_interval=settings.feed_poll_interval,
                         heartbeat_interval=settings.feed_heartbeat_interval),
    )
    app = FastAPI(title="settlekit", version="0.1.0", docs_url=None, redoc_url=None,
                  lifespan=_lifespan_closing(ctx, database if owned else None),
                  description="Event-sourced settlement engine: jobs, ledger, artifacts, deliveries, ops.")
    app.state.settlekit = ctx
    _add_error_handlers(app)
    # Routes are added flat (not include_router) so `app.routes` lists every APIRoute with its full path.
    app.router.routes.extend(route for router in ROUTERS for route in router.routes)
    add_docs(app)
    _document_security(app)
    _add_middleware(app, ctx, settings)
    return app


def _destination_policy(settings: Settings) -> DestinationPolicy:
    """The webhook network policy the settings ask for."""
    return DestinationPolicy(
        allow_insecure_http=settings.allow_insecure_http or settings.allow_loopback_webhooks,
        allow_loopback=settings.allow_loopback_webhooks,
        allow_private_network=settings.allow_private_webhooks,
        allowed_networks=settings.allowed_webhook_networks)


def _lifespan_closing(ctx: ApiContext, database: Database | None,
                      ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """An app lifespan that ends the open event streams and closes `database` (if any) at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if ctx.feed is not None:
            ctx.feed.close()
        if database is not None:
            database.close()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error becomes a problem+json body."""
    app.add_exception_handler(SettlekitError, settlekit_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unhandled_error_handler)


def _add_middleware(app: FastAPI, ctx: ApiContext, settings: Settings) -> None:
    """The middleware stack; the last added runs first (request log, metrics, input guard, auth, body limit)."""
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(AuthMiddleware, ctx=ctx, open_paths=OPEN_PATHS, open_prefixes=OPEN_PREFIXES,
                       routed=_routed_by(app))
    app.add_middleware(InputGuardMiddleware)
    app.add_middleware(_MetricsMiddleware, metrics=_metrics_for(ctx.registry))
    append_metrics_for(ctx.registry)  # registered now: every append outcome is exported (at 0) before the first
    app.add_middleware(RequestLogMiddleware)


def _routed_by(app: FastAPI) -> Callable[[Scope], bool]:
    """Whether a route of `app` serves the request's path (for any method)."""

    def routed(scope: Scope) -> bool:
        return any(route.matches(scope)[0] is not Match.NONE for route in app.router.routes)

    return routed


_RESPONSE_HEADERS: dict[str, Any] = {
    "X-Request-Id": {"description": "The request's id: the client's X-Request-Id (1..128 visible ASCII characters) "
                                    "or a generated one; also the requestId of a problem body.",
                     "schema": {"type": "string"}},
    "RateLimit-Limit": {"description": "The API key's token bucket: requests allowed in a burst.",
                        "schema": {"type": "integer"}},
    "RateLimit-Remaining": {"description": "Requests the API key may still make now.",
                            "schema": {"type": "integer"}},
    "RateLimit-Reset": {"description": "Seconds until the API key's bucket is full again.",
                        "schema": {"type": "integer"}},
}


def _document_security(app: FastAPI) -> None:
    """OpenAPI: every operation needs the bearer API key except the open paths; every answer carries its request
    id, and an authenticated one the RateLimit-* headers."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                "apiKey": {"type": "http", "scheme": "bearer", "bearerFormat": "sk_<keyid>_<secret>",
                           "description": "An API key: `Authorization: Bearer sk_…`, bound to one tenant and "
                                          "a set of scopes."}}
            schema["security"] = [{"apiKey": []}]
            schema["components"]["headers"] = _RESPONSE_HEADERS
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    if path in OPEN_PATHS:
                        operation["security"] = []
                    names = ["X-Request-Id"] if path in OPEN_PATHS else list(_RESPONSE_HEADERS)
                    for response in operation.get("responses", {}).values():
                        response.setdefault("headers", {}).update(
                            {name: {"$ref": f"#/components/headers/{name}"} for name in names})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
