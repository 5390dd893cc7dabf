"""The HTTP API: `create_app(db_url or Database, settings, server_signer=...)`.

Every route except /healthz, /readyz, /openapi.json and the documentation (/docs, /redoc) needs an API key
(`Authorization: Bearer sk_…`), is scoped to the key's tenant and rate-limited per key (RateLimit-* headers); a
path no route serves answers 404 with or without a key. Errors are RFC 9457 problem+json bodies with a stable
`code` and the `requestId`; stack traces are never returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from prometheus_client import REGISTRY, CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse
from starlette.routing import Match, Mount, Route
from starlette.types import ASGIApp, Scope

from settlekit.api.admission import OutboundSlots
from settlekit.api.deps import ApiContext, auth_thread_pool, url_check_slots
from settlekit.api.docs import ASSETS_PATH, DOC_PATHS, add_docs
from settlekit.api.feed import FeedStreams
from settlekit.api.middleware import ApiMiddleware, DirectRoute
from settlekit.api.openapi import document
from settlekit.api.problems import (
    http_error_handler,
    settlekit_error_handler,
    unhandled_error_handler,
    validation_error_handler,
)
from settlekit.api.ratelimit import RateLimiter
from settlekit.api.routes import ROUTERS
from settlekit.api.routes.jobs import DIRECT_CACHED, DIRECT_HANDLERS, DIRECT_PREFETCH, append_metrics_for
from settlekit.api.settld_compat import PREFIX as SETTLD_PREFIX
from settlekit.api.settld_compat import SettldErrors, compat_app
from settlekit.application.artifacts import ArtifactStore
from settlekit.application.database import Database, connect
from settlekit.application.destinations import DestinationPolicy
from settlekit.application.jobs import FeedReader, job_appender
from settlekit.errors import SettlekitError
from settlekit.events.envelope import Signer
from settlekit.runtime.settings import Settings

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", *DOC_PATHS})
OPEN_PREFIXES = (f"{ASSETS_PATH}/",)
# long-lived answers, not counted against `max_routed_requests` (the feed bounds its streams per tenant)
UNBOUNDED_PATHS = frozenset({"/v1/events/stream"})
# A sub-application mounted at a path prefix (`create_app(mounts=...)`), built on the API's context: it
# authenticates its own requests (the console: a session cookie), within the API's bound of routed requests.
SubApp = Callable[[ApiContext], ASGIApp]


def create_app(
    db: str | Database,
    settings: Settings | None = None,
    *,
    server_signer: Signer | None,
    destination_policy: DestinationPolicy | None = None,
    registered_consumers: Sequence[str] | None = None,
    registry: CollectorRegistry | None = None,
    close_db: bool = False,
    mounts: Mapping[str, SubApp] | None = None,
) -> FastAPI:
    """Build the API on a Database (or a URL, opened, migrated and closed with the app) with `settings` (default:
    `Settings()`, from the environment): body limit, rate limits, operator tenant and the webhook network policy.
    The live objects are given as they are: `destination_policy` (default: from the settings),
    `registered_consumers`, the metrics `registry` (default: the global one). Destination secrets given by value
    are stored per tenant in the database. Consumer verbs need an `admin` key of the operator tenant.
    `close_db`: close a given Database when the app shuts down (a URL's is always closed). `mounts`: sub-applications
    by path prefix (the operator console), each authenticating its own requests.
    """
    settings = settings if settings is not None else Settings()
    owned = isinstance(db, str)
    database = connect(db, **settings.database_options(db)) if isinstance(db, str) else db
    if owned:
        database.migrate()
    policy = destination_policy or DestinationPolicy.from_settings(settings)
    ctx = ApiContext(
        db=database,
        appender=job_appender(database, server_signer=server_signer, group_commit=True,
                           max_queued=settings.max_queued_appends, cached_streams=settings.append_cached_streams,
                           group_window=settings.group_commit_window_ms / 1000),
        auth_threads=auth_thread_pool(settings.max_queued_appends),
        limiter=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        auth_failures=RateLimiter(settings.auth_failure_rate_per_second, settings.auth_failure_burst,
                                  max_entries=50_000),
        artifacts=ArtifactStore(),
        destination_policy=policy,
        operator_tenant=settings.operator_tenant,
        registered_consumers=registered_consumers,
        registry=registry if registry is not None else REGISTRY,
        replay_policy=settings.replay_policy(),
        test_sends=OutboundSlots(per_tenant=settings.test_send_concurrency,
                                 total=max(1, settings.max_routed_requests // 8), timeout=settings.test_send_timeout),
        url_checks=url_check_slots(settings.max_routed_requests),
        feed=FeedStreams(FeedReader(database), max_per_tenant=settings.feed_max_streams_per_tenant,
                         poll_interval=settings.feed_poll_interval,
                         heartbeat_interval=settings.feed_heartbeat_interval),
    )
    # redirect_slashes off: `/v1/jobs/` (an empty job id) is 404 NOT_FOUND, not a 307 to the job listing
    app = FastAPI(title="settlekit", version="0.1.0", docs_url=None, redoc_url=None, redirect_slashes=False,
                  lifespan=_lifespan_closing(ctx, database if owned or close_db else None),
                  description="Event-sourced settlement engine: jobs, ledger, artifacts, deliveries, ops.")
    app.state.settlekit = ctx
    _add_error_handlers(app)
    # Routes are added flat (not include_router) so `app.routes` lists every APIRoute with its full path.
    app.router.routes.extend(route for router in ROUTERS for route in router.routes)
    # settld's clients (api.settld_compat): a sub-application, outside the OpenAPI document
    app.router.routes.append(Mount(SETTLD_PREFIX, app=compat_app(ctx)))
    for prefix, build in (mounts or {}).items():
        app.router.routes.append(Route(prefix, _redirect_to(f"{prefix}/"), include_in_schema=False))
        app.router.routes.append(Mount(prefix, app=build(ctx)))
    add_docs(app)
    document(app, OPEN_PATHS, UNBOUNDED_PATHS)
    _add_middleware(app, ctx, settings, tuple(mounts or ()))
    return app


def _redirect_to(location: str) -> Callable[..., RedirectResponse]:
    def redirect(request: object) -> RedirectResponse:
        return RedirectResponse(location, status_code=308)

    return redirect


def _lifespan_closing(ctx: ApiContext, database: Database | None
                      ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """An app lifespan that ends the open event streams, stops the appender's group commit writer and closes
    `database` (if any) at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if ctx.feed is not None:
            ctx.feed.close()
        await asyncio.to_thread(ctx.auth_threads.shutdown, wait=True, cancel_futures=True)
        ctx.appender.close()
        if database is not None:
            database.close()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error becomes a problem+json body."""
    app.add_exception_handler(SettlekitError, settlekit_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unhandled_error_handler)


def _add_middleware(app: FastAPI, ctx: ApiContext, settings: Settings, session_prefixes: tuple[str, ...]) -> None:
    """The one middleware (api.middleware: request id and log line, metrics, input guard, auth, body limit)."""
    direct = [DirectRoute(route, DIRECT_HANDLERS[route.path], DIRECT_PREFETCH.get(route.path),
                          DIRECT_CACHED.get(route.path))
              for route in app.router.routes
              if isinstance(route, APIRoute) and route.path in DIRECT_HANDLERS and "POST" in (route.methods or ())]
    app.add_middleware(ApiMiddleware, ctx=ctx, open_paths=OPEN_PATHS, open_prefixes=OPEN_PREFIXES,
                       routed=_routed_by(app), max_body_bytes=settings.max_body_bytes, direct=direct,
                       max_routed_requests=settings.max_routed_requests, unbounded_paths=UNBOUNDED_PATHS,
                       session_prefixes=session_prefixes)
    # outermost: settld's error shape for every answer under its prefix, the middleware's refusals included
    app.add_middleware(SettldErrors, at_root=settings.settld_compat_at_root)
    append_metrics_for(ctx.registry)  # registered now: every append outcome is exported (at 0) before the first


def _routed_by(app: FastAPI) -> Callable[[Scope], bool]:
    """Whether a route of `app` serves the request's path (for any method)."""

    def routed(scope: Scope) -> bool:
        return any(route.matches(scope)[0] is not Match.NONE for route in app.router.routes)

    return routed
