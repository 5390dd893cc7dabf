"""The HTTP API: `create_app(db_url or Database, server_signer=..., settings=...)`.

Every route except /healthz, /readyz, /openapi.json and /docs needs an API key (`Authorization:
Bearer sk_…`), is scoped to the key's tenant and rate-limited per key. Errors are RFC 9457 problem+json bodies
with a stable `code`; stack traces are never returned.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from settlekit.api.deps import ApiContext, AuthMiddleware
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
from settlekit.delivery.service import DestinationPolicy
from settlekit.errors import SettlekitError
from settlekit.events.envelope import Signer
from settlekit.store.artifacts import ArtifactStore
from settlekit.store.db import Database, connect
from settlekit.store.job_streams import job_store

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
DEFAULT_MAX_BODY_BYTES = 1_048_576
DEFAULT_OPERATOR_TENANT = "system"


class _ApiMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("settlekit_api_requests", "API requests by method, route and status",
                                ["method", "route", "status"], registry=registry)
        self.duration = Histogram("settlekit_api_request_duration_seconds", "API request duration by route",
                                  ["method", "route"], registry=registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, _ApiMetrics] = weakref.WeakKeyDictionary()
_METRICS_LOCK = threading.Lock()


def _metrics_for(registry: CollectorRegistry) -> _ApiMetrics:
    with _METRICS_LOCK:
        found = _METRICS.get(registry)
        if found is None:
            found = _METRICS[registry] = _ApiMetrics(registry)
        return found


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


def _setting(settings: Any, name: str, default: Any) -> Any:
    value = getattr(settings, name, None) if settings is not None else None
    return default if value is None else value


def create_app(
    db: str | Database,
    *,
    server_signer: Signer | None,
    settings: Any = None,
    max_body_bytes: int | None = None,
    rate_limit_per_second: float | None = None,
    rate_limit_burst: int | None = None,
    destination_policy: DestinationPolicy | None = None,
    operator_tenant: str | None = None,
    registered_consumers: Sequence[str] | None = None,
    registry: CollectorRegistry | None = None,
    max_payload_bytes: int | None = None,
) -> FastAPI:
    """Build the API on a Database (or a URL, opened, migrated and closed with the app).

    `settings` is a `settlekit.runtime.Settings` (or anything with the same attribute names); explicit keyword
    arguments win over it. Destination secrets given by value are stored per tenant in the database.
    Consumer verbs need an `admin` key of `operator_tenant` (default "system").
    """
    owned = isinstance(db, str)
    database = connect(db) if isinstance(db, str) else db
    if owned:
        database.migrate()
    body_limit = int(max_body_bytes if max_body_bytes is not None
                     else _setting(settings, "max_body_bytes", DEFAULT_MAX_BODY_BYTES))
    rate = float(rate_limit_per_second if rate_limit_per_second is not None
                 else _setting(settings, "rate_limit_per_second", 50.0))
    burst = int(rate_limit_burst if rate_limit_burst is not None else _setting(settings, "rate_limit_burst", 100))
    loopback = bool(_setting(settings, "allow_loopback_webhooks", False))
    insecure = bool(_setting(settings, "allow_insecure_http", False)) or loopback
    policy = destination_policy or DestinationPolicy(
        allow_insecure_http=insecure, allow_loopback=loopback,
        allow_private_network=bool(_setting(settings, "allow_private_webhooks", False)),
        allowed_networks=tuple(_setting(settings, "allowed_webhook_networks", ())))
    store_options: dict[str, Any] = {"server_signer": server_signer}
    if max_payload_bytes is not None:
        store_options["max_payload_bytes"] = max_payload_bytes
    ctx = ApiContext(
        db=database,
        store=job_store(database, **store_options),
        limiter=RateLimiter(rate, burst),
        auth_failures=RateLimiter(float(_setting(settings, "auth_failure_rate_per_second", 1.0)),
                                  int(_setting(settings, "auth_failure_burst", 20)), max_entries=50_000),
        artifacts=ArtifactStore(),
        destination_policy=policy,
        operator_tenant=operator_tenant or _setting(settings, "operator_tenant", DEFAULT_OPERATOR_TENANT),
        registered_consumers=registered_consumers,
        registry=registry if registry is not None else REGISTRY,
    )

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        if owned:
            database.close()

    app = FastAPI(title="settlekit", version="0.1.0", redoc_url=None, lifespan=lifespan,
                  description="Event-sourced settlement engine: jobs, ledger, artifacts, deliveries, ops.")
    app.state.settlekit = ctx
    app.add_exception_handler(SettlekitError, settlekit_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unhandled_error_handler)
    # Routes are added flat (not include_router) so `app.routes` lists every APIRoute with its full path.
    app.router.routes.extend(route for router in ROUTERS for route in router.routes)
    _document_security(app)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=body_limit)
    app.add_middleware(AuthMiddleware, ctx=ctx, open_paths=OPEN_PATHS)
    app.add_middleware(InputGuardMiddleware)
    app.add_middleware(_MetricsMiddleware, metrics=_metrics_for(ctx.registry))
    app.add_middleware(RequestLogMiddleware)
    return app


def _document_security(app: FastAPI) -> None:
    """OpenAPI: every operation needs the bearer API key except the open paths."""

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
            for path, operations in schema.get("paths", {}).items():
                if path in OPEN_PATHS:
                    for operation in operations.values():
                        operation["security"] = []
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
